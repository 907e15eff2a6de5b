//! The receiver guide's verification code (docs/receivers), run against the spec's test vector:
//! Rust compiled in here, Python with python3, TypeScript with tsc and node.

#[path = "../../../../docs/receivers/verify.rs"]
mod verify;

use std::process::Command;

const SIG: &str = "v1,sha256=49d0851d6baa34655d12dfba153c748db08b84830d4cb01780d833956c59844c";
const BODY: &[u8] = br#"{"id":"123"}"#;

fn docs() -> std::path::PathBuf {
    crate::sdk::repo().join("docs/receivers")
}

#[test]
fn the_rust_receiver_code_verifies_the_test_vector() {
    assert!(verify::verify(&["test-secret"], "1700000000", BODY, &[SIG], 1_700_000_000));
    assert!(verify::verify(&["other", "test-secret"], "1700000000", BODY, &["v1,sha256=00", SIG], 1_700_000_100));
    assert!(!verify::verify(&["test-secret"], "1700000000", br#"{"id":"124"}"#, &[SIG], 1_700_000_000));
    assert!(!verify::verify(&["wrong"], "1700000000", BODY, &[SIG], 1_700_000_000));
    assert!(!verify::verify(&["test-secret"], "1700000000", BODY, &[SIG], 1_700_000_301), "stale");
    // The hub's own signer agrees with the guide.
    let sig = hub_core::signature::sign("whsec_x", 1_700_000_000, BODY);
    assert!(verify::verify(&["whsec_x"], "1700000000", BODY, &[&sig], 1_700_000_000));
}

#[test]
fn the_python_receiver_code_verifies_the_test_vector() {
    let out = Command::new("python3").arg(docs().join("verify.py")).output().expect("python3 is required");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "python: ok");
}

#[test]
fn the_typescript_receiver_code_verifies_the_test_vector() {
    // From the cache folder scripts/services installs into (STREAMING_HUB_CACHE), as every tool.
    let tsc = crate::sdk::cache_dir().join("typescript/node_modules/.bin/tsc").display().to_string();
    // tsc is …/node_modules/.bin/tsc; the Node types sit beside it in …/node_modules/@types.
    let type_roots =
        std::path::Path::new(&tsc).parent().and_then(|p| p.parent()).map(|p| p.join("@types")).expect("types");
    let out_dir = std::env::temp_dir().join(format!("streaming-hub-ts-{}", uuid::Uuid::now_v7().simple()));
    let compiled = Command::new(&tsc)
        .args(["--strict", "--target", "es2022", "--module", "commonjs", "--types", "node", "--typeRoots"])
        .arg(&type_roots)
        .arg("--outDir")
        .arg(&out_dir)
        .arg(docs().join("verify.ts"))
        .output()
        .unwrap_or_else(|e| panic!("TypeScript is required ({tsc}; scripts/services typescript installs it): {e}"));
    assert!(
        compiled.status.success(),
        "{}{}",
        String::from_utf8_lossy(&compiled.stdout),
        String::from_utf8_lossy(&compiled.stderr)
    );
    let run = Command::new("node").arg(out_dir.join("verify.js")).output().expect("node is required");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "typescript: ok");
}

//! The build's identity for `streaming-hub --version`, the `streaming_hub_build_info` metric and
//! the image labels: the git revision and the build date. An image build has no `.git`, so both
//! can be given (`STREAMING_HUB_REVISION`, and `STREAMING_HUB_BUILD_EPOCH` or `SOURCE_DATE_EPOCH`
//! for a reproducible date).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=STREAMING_HUB_REVISION");
    println!("cargo:rerun-if-env-changed=STREAMING_HUB_BUILD_EPOCH");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/refs/heads");
    let revision = std::env::var("STREAMING_HUB_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty())
        .or_else(|| {
            let out = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
            out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let epoch =
        // The image build names the date in a variable of ours: `SOURCE_DATE_EPOCH` in the build's
        // environment is also read by dependencies' build scripts, which would then rebuild.
        std::env::var("STREAMING_HUB_BUILD_EPOCH").or_else(|_| std::env::var("SOURCE_DATE_EPOCH")).ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
        });
    // Named outside STREAMING_HUB_*: `cargo run` also puts these in the running hub's
    // environment, where a STREAMING_HUB_ name would be read as a setting it does not know.
    println!("cargo:rustc-env=HUB_BUILD_REVISION={}", revision.trim());
    println!("cargo:rustc-env=HUB_BUILD_DATE={}", civil_date(epoch));
}

/// `YYYY-MM-DD` of a Unix time (UTC), by the days-from-civil algorithm in reverse.
fn civil_date(epoch: u64) -> String {
    let days = (epoch / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

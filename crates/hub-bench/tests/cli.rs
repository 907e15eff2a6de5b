//! The `hub-bench` command end to end: every scenario runs against a `streaming-hub` process
//! and reports what it measured (figures are printed and written, never asserted).

use std::path::PathBuf;
use std::process::Command;

use hub_testkit::postgres_dsn;

/// `hub-bench`, driving the `streaming-hub` binary built beside it, with no `STREAMING_HUB_*`
/// variable of the test's environment.
fn bench_command() -> Command {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_hub-bench"));
    let hub = bin.with_file_name("streaming-hub");
    assert!(hub.is_file(), "the streaming-hub binary is built beside hub-bench ({}): cargo build", hub.display());
    let mut cmd = Command::new(bin);
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("STREAMING_HUB_")) {
        cmd.env_remove(key);
    }
    cmd.env("STREAMING_HUB_BENCH_HUB", hub);
    cmd
}

fn temp_path() -> PathBuf {
    let dir = std::env::temp_dir().join("streaming-hub-tests");
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(format!("bench-{}", uuid::Uuid::now_v7()))
}

/// The bench command runs end to end (its figures are printed, never asserted).
#[test]
fn the_push_burst_bench_runs_and_reports() {
    let json = temp_path().with_extension("json");
    let out = bench_command()
        .args(["push-burst", "--events", "40", "--producers", "4", "--tenants", "2", "--json"])
        .arg(&json)
        .output()
        .expect("run the bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.lines().any(|l| l.trim_start().starts_with("delivered") && l.ends_with("40 of 40")), "{stdout}");
    let figures: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("json");
    assert_eq!(figures["delivered"], 40);
    assert_eq!(figures["duplicates"], 0);
    assert!(figures["latency_ms"]["p99"].is_number());
    let bad = bench_command().args(["push-burst", "--events", "0"]).output().expect("run");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--events"));
    // The pull consumer reads every event once.
    let pull = bench_command()
        .args(["pull", "--events", "30", "--page", "7", "--json"])
        .arg(json.with_extension("pull.json"))
        .output()
        .expect("run the pull bench");
    assert!(pull.status.success(), "{}", String::from_utf8_lossy(&pull.stderr));
    let figures: serde_json::Value =
        serde_json::from_slice(&std::fs::read(json.with_extension("pull.json")).expect("json written")).expect("json");
    assert_eq!(figures["read"], 30);
    assert_eq!(figures["pages"], 5);
}

/// Runs a bench scenario with small figures and returns its JSON.
fn run_bench(args: &[&str], envs: &[(&str, String)]) -> serde_json::Value {
    let json = temp_path().with_extension("bench.json");
    let out = bench_command()
        .args(args)
        .arg("--json")
        .arg(&json)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run the bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{args:?}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("json")
}

/// Every scenario runs end to end and reports what it measured (figures are never asserted).
#[test]
fn the_other_bench_scenarios_run_and_report() {
    let steady = run_bench(&["steady", "--rate", "40", "--seconds", "1"], &[]);
    assert_eq!(steady["sent"], steady["delivered"]);
    assert!(steady["sent"].as_u64().expect("sent") >= 30, "{steady}");
    assert_eq!(steady["duplicates"], 0);
    let worst = &steady["worst_seconds"][0];
    assert!(worst["sent"].as_u64().expect("the slowest second's events") >= 1, "{steady}");
    assert!(
        worst["latency_ms"]["max"].as_f64() >= steady["latency_ms"]["p99"].as_f64(),
        "the slowest second holds the slowest delivery: {steady}"
    );

    let disk = run_bench(&["disk", "--seconds", "1", "--dir", &std::env::temp_dir().display().to_string()], &[]);
    assert!(disk["flushes"].as_u64().expect("flushes") >= 1, "{disk}");
    assert!(disk["flush_ms"]["max"].as_f64() >= disk["flush_ms"]["p50"].as_f64(), "{disk}");
    let refused = bench_command().args(["disk", "--dir", "/nonexistent/hub-bench"]).output().expect("run");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--dir /nonexistent/hub-bench"), "names the argument");

    let slow = run_bench(&["slow-destination", "--events", "30"], &[]);
    assert!(slow["fast_solo_per_s"].as_f64().expect("solo") > 0.0);
    assert!(slow["fast_beside_slow_per_s"].as_f64().expect("beside") > 0.0);

    let fair = run_bench(&["fairness", "--flood", "200", "--rate", "10"], &[]);
    assert_eq!(fair["small_sent"], fair["small_delivered"], "{fair}");
    assert_eq!(fair["flood_duplicates"], 0);
    assert!(fair["small_solo_latency_ms"]["p99"].is_number());

    let replay = run_bench(&["replay", "--history", "50", "--rate", "20"], &[]);
    // The whole inbox: the history and the live events sent alone before the replay.
    assert!(replay["replay"]["created"].as_u64().expect("created") > 50, "{replay}");
    assert_eq!(replay["replay"]["created"], replay["replay"]["matched"], "{replay}");
    assert_eq!(replay["live_sent"], replay["live_delivered"], "{replay}");
    assert_eq!(replay["live_duplicates"], 0);
    assert!(replay["live_beside_replay_latency_ms"]["p99"].is_number());
}

/// The ingest scenario needs a broker (Apache Kafka, as `scripts/test` installs) and runs on
/// PostgreSQL.
#[test]
fn the_ingest_and_kafka_burst_scenarios_run_on_postgres() {
    let kafka = hub_testkit::kafka::kafka_home();
    assert!(kafka.join("lib").is_dir(), "Apache Kafka is required ({}); scripts/test installs it", kafka.display());
    let envs =
        [("STREAMING_HUB_KAFKA_HOME", kafka.display().to_string()), ("STREAMING_HUB_POSTGRES_DSN", postgres_dsn())];
    let ingest = run_bench(&["ingest", "--events", "200", "--tenants", "3", "--partitions", "2"], &envs);
    assert_eq!(ingest["store"], "postgres");
    for figure in ["hub_events_per_s", "plain_insert_rows_per_s", "broker_read_per_s", "write_path_events_per_s"] {
        assert!(ingest[figure].as_f64().expect(figure) > 0.0, "{figure}: {ingest}");
    }
    // The database's floor: every statement measured, paced and back to back; it names the
    // variable it needs when that is missing.
    let commit = run_bench(&["commit", "--rate", "200", "--seconds", "1"], &envs[1..]);
    assert!(commit["paced_ms"]["statements"].as_u64().expect("paced") >= 100, "{commit}");
    assert!(commit["back_to_back_ms"]["statements"].as_u64().expect("back to back") >= 1, "{commit}");
    assert!(commit["paced_ms"]["max"].as_f64() >= commit["paced_ms"]["p50"].as_f64(), "{commit}");
    let refused = bench_command().args(["commit", "--seconds", "1"]).output().expect("run");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("STREAMING_HUB_POSTGRES_DSN"), "names the variable");
    let burst = run_bench(&["push-burst", "--via", "kafka", "--events", "100", "--tenants", "2"], &envs);
    assert_eq!((burst["delivered"].as_u64(), burst["duplicates"].as_u64()), (Some(100), Some(0)), "{burst}");
}

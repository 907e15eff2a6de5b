//! Logs and metrics.
//!
//! Logs are human-readable in `local` and JSON elsewhere; they never carry payloads or secrets.
//! Metrics use the `metrics` facade with a Prometheus recorder installed once per process and
//! rendered at `/metrics`. No metric has a tenant label (unbounded cardinality).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

/// Metric names: the fixed ones of the spec and the hub's own.
pub mod metric {
    /// `{verdict}`: accepted, duplicate, discarded, quarantined.
    pub const INGEST_RECORDS: &str = "streaming_hub_ingest_records_total";
    /// `{outcome}`: served, rate_limited.
    pub const PULL_READS: &str = "streaming_hub_pull_reads_total";
    /// Events returned by pull reads.
    pub const PULL_EVENTS: &str = "streaming_hub_pull_events_total";
}

/// Installs the log subscriber; JSON unless `local`. `STREAMING_HUB_LOG` (or `RUST_LOG`) sets
/// the filter, `info` by default.
pub fn init_logs(json: bool) {
    let filter = std::env::var("STREAMING_HUB_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let result = if json { builder.json().flatten_event(true).try_init() } else { builder.try_init() };
    // A second call (tests start several hubs in one process) keeps the first subscriber.
    drop(result);
}

/// The process-wide Prometheus recorder.
pub fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        // Fails only if another recorder was installed first, in which case ours stays unused.
        drop(metrics::set_global_recorder(recorder));
        describe();
        handle
    })
}

fn describe() {
    metrics::describe_counter!(metric::INGEST_RECORDS, "Records ingested, by verdict");
    metrics::describe_counter!(metric::PULL_READS, "Pull reads, by outcome (served, rate_limited)");
    metrics::describe_counter!(metric::PULL_EVENTS, "Events returned by pull reads");
    for outcome in ["served", "rate_limited"] {
        metrics::counter!(metric::PULL_READS, "outcome" => outcome).increment(0);
    }
    for verdict in ["accepted", "duplicate", "discarded", "quarantined"] {
        metrics::counter!(metric::INGEST_RECORDS, "verdict" => verdict).increment(0);
    }
}

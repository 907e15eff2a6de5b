//! Logs and metrics.
//!
//! Logs are human-readable in `local` and JSON elsewhere; they never carry payloads or secrets.
//! Metrics use the `metrics` facade with a Prometheus recorder installed once per process and
//! rendered at `/metrics`. No metric has a tenant label (unbounded cardinality).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

/// Metric names: the fixed ones of the spec and the hub's own.
pub mod metric {
    /// `{verdict}`: accepted, duplicate, discarded, quarantined.
    pub const INGEST_RECORDS: &str = "streaming_hub_ingest_records_total";
    /// `{outcome}`: served, rate_limited.
    pub const PULL_READS: &str = "streaming_hub_pull_reads_total";
    /// Events returned by pull reads.
    pub const PULL_EVENTS: &str = "streaming_hub_pull_events_total";
    /// `{sink,outcome}`: delivered, failed, skipped (by the subscription's transform).
    pub const DELIVERY_ATTEMPTS: &str = "streaming_hub_delivery_attempts_total";
    /// `{sink}`: how long attempts take.
    pub const ATTEMPT_SECONDS: &str = "streaming_hub_delivery_attempt_duration_seconds";
    /// How long one ingest write takes, from its start to its commit (a group of HTTP posts, or a
    /// Kafka partition's batch).
    pub const INGEST_WRITE_SECONDS: &str = "streaming_hub_ingest_write_duration_seconds";
    /// `{sink}`: jobs dead-lettered after their last attempt.
    pub const JOBS_DEAD: &str = "streaming_hub_delivery_dead_letters_total";
    /// Jobs leased to this process's workers as its ingest wrote them (the fast path, no claim).
    pub const JOBS_LEASED_AT_INGEST: &str = "streaming_hub_delivery_jobs_leased_at_ingest_total";
    /// Attempts in flight in this process (`STREAMING_HUB_MAX_IN_FLIGHT` bounds it).
    pub const IN_FLIGHT: &str = "streaming_hub_delivery_in_flight";
    /// Cuts of a destination's adaptive allowance (a `429`, `503` or timeout; see
    /// `delivery::capacity`).
    pub const ALLOWANCE_CUTS: &str = "streaming_hub_delivery_allowance_cuts_total";
    /// Destinations paused by a `Retry-After`.
    pub const DESTINATION_PAUSES: &str = "streaming_hub_delivery_destination_pauses_total";
    /// Times a subscription's jobs waited for its pace (`limits.per_second`, or the rate its
    /// receiver declared).
    pub const RATE_WAITS: &str = "streaming_hub_delivery_rate_waits_total";
    /// Jobs taken back after their lease expired without an outcome.
    pub const LEASES_RECOVERED: &str = "streaming_hub_delivery_leases_recovered_total";
    /// Jobs dead-lettered as poison.
    pub const JOBS_POISONED: &str = "streaming_hub_delivery_poison_total";
    /// `{to}`: open, half_open, closed.
    pub const BREAKER_TRANSITIONS: &str = "streaming_hub_breaker_transitions_total";
    /// Records stored by the DLQ plane (fixed name).
    pub const DLQ_RECORDS: &str = "streaming_hub_dlq_records_total";
    /// `{state}`: delivery jobs by state (fixed name).
    pub const DELIVERY_JOBS: &str = "streaming_hub_delivery_jobs";
    pub const ORDERING_BLOCKED_KEYS: &str = "streaming_hub_ordering_blocked_keys";
    /// Events in the inbox (an estimate on PostgreSQL).
    pub const INBOX_EVENTS: &str = "streaming_hub_inbox_events";
    /// `{consumer,topic,partition}`: records behind the partition's end, as librdkafka reports it.
    pub const CONSUMER_LAG: &str = "streaming_hub_kafka_consumer_lag";
    /// `{kind}`: records deleted by retention.
    pub const PRUNED: &str = "streaming_hub_pruned_records_total";
    /// `{kind}`: when this replica last finished a retention pass of the kind (Unix seconds).
    pub const RETENTION_DONE: &str = "streaming_hub_retention_last_pass_timestamp_seconds";
    /// Subscriptions disabled automatically.
    pub const AUTO_DISABLED: &str = "streaming_hub_subscriptions_auto_disabled_total";
    /// Connections answered 503 and closed because the server had its maximum open.
    pub const HTTP_REFUSED_CONNECTIONS: &str = "streaming_hub_http_refused_connections_total";
    /// `{sink,kind}`: failed attempts by what failed (timeout, connect, 4xx, 5xx, refused,
    /// unauthorized, forbidden).
    pub const DELIVERY_FAILURES: &str = "streaming_hub_delivery_failures_total";
    /// `{sink,kind}`: failed verification probes by what failed (the same kinds as
    /// `DELIVERY_FAILURES`); the tenant is told only that the destination was not reached.
    pub const VERIFICATION_FAILURES: &str = "streaming_hub_verification_failures_total";
    /// How long the oldest due job has waited for an attempt (0 when none waits).
    pub const OLDEST_PENDING_AGE: &str = "streaming_hub_oldest_pending_job_age_seconds";
    /// `{state}`: circuit breakers of this process that are open or half-open.
    pub const BREAKERS: &str = "streaming_hub_breakers";
    /// `{kind,outcome}`: operational events queued, dropped (queue full) or lost (not written).
    pub const OPERATIONAL_EVENTS: &str = "streaming_hub_operational_events_total";
    /// `{state}`: the store's pooled connections, `open` and `idle` among them.
    pub const STORE_CONNECTIONS: &str = "streaming_hub_store_connections";
    /// The most connections the store's pool may open.
    pub const STORE_CONNECTIONS_MAX: &str = "streaming_hub_store_connections_max";
    /// 1 when the last refresh of the job gauges reached the store, else 0.
    pub const STORE_UP: &str = "streaming_hub_store_up";
    /// `{version,revision,build_date}`: 1, naming the build.
    pub const BUILD_INFO: &str = "streaming_hub_build_info";
    /// `{result}`: manifest source fetches (`ok`, `failed`).
    pub const MANIFEST_FETCHES: &str = "streaming_hub_manifest_fetches_total";
    /// Manifest sources whose last fetch failed (their last good manifest is still used).
    pub const MANIFEST_SOURCES_FAILING: &str = "streaming_hub_manifest_sources_failing";
    /// `{mode}`: accepted-event bodies that did not satisfy their declared JSON Schema (`warn`:
    /// accepted and counted; `quarantine`: refused).
    pub const PAYLOAD_SCHEMA_MISMATCHES: &str = "streaming_hub_payload_schema_mismatches_total";
    /// How long one run of a subscription's transform takes, its wait for a transform thread
    /// included.
    pub const TRANSFORM_SECONDS: &str = "streaming_hub_transform_duration_seconds";
    /// `{result}`: transform runs that reshaped the event (`transformed`), skipped it, or failed.
    pub const TRANSFORM_RUNS: &str = "streaming_hub_transform_runs_total";
    /// Ledger checkpoints this replica signed.
    pub const LEDGER_CHECKPOINTS: &str = "streaming_hub_ledger_checkpoints_total";
    /// Ledger seals refused because an entry no longer matches what was appended (changed or
    /// removed in the store).
    pub const LEDGER_REFUSED: &str = "streaming_hub_ledger_seal_refusals_total";
    /// Changes that could not be appended to the ledger.
    pub const LEDGER_UNRECORDED: &str = "streaming_hub_ledger_unrecorded_changes_total";
    /// People's tokens refused, by reason (`sso::Refusal::reason`).
    pub const SSO_REFUSALS: &str = "streaming_hub_sso_refusals_total";
    /// Fetches of an identity provider's keys that failed, by issuer.
    pub const SSO_KEY_FETCH_FAILURES: &str = "streaming_hub_sso_key_fetch_failures_total";
    /// Console sign-ins through the identity provider, by outcome (`signed_in`, or why not:
    /// `sso::console::SignInError::reason`).
    pub const CONSOLE_SIGN_INS: &str = "streaming_hub_console_sign_ins_total";
    /// Attempts that panicked (recorded as failures and retried; the hub's log says where).
    pub const ATTEMPT_PANICS: &str = "streaming_hub_attempt_panics_total";
    /// `{reason}`: 1 while this replica's delivery makes no progress (`loop`: the dispatch loop
    /// stopped turning; `slots`: every slot held and no attempt ending).
    pub const DELIVERY_STALLED: &str = "streaming_hub_delivery_stalled";
    /// Requests whose handler panicked (answered `500` in the error shape; the log says where).
    pub const HTTP_PANICS: &str = "streaming_hub_http_panics_total";
    /// `{state}`: transform worker processes `alive`, and `busy` with a run.
    pub const TRANSFORM_WORKERS: &str = "streaming_hub_transform_workers";
    /// Transform runs waiting for a worker.
    pub const TRANSFORM_WAITING: &str = "streaming_hub_transform_waiting";
    /// `{reason}`: transform workers stopped: killed past a run's CPU bound (`cpu`), killed by
    /// the wall-time watchdog (`wall`), or ended by themselves (`crashed`: the engine crashed,
    /// the system-call filter, killed from outside).
    pub const TRANSFORM_WORKERS_STOPPED: &str = "streaming_hub_transform_workers_stopped_total";
    /// Destination buckets this replica paces (of 1024; all of them when it delivers alone, none
    /// while it joins others or does not deliver).
    pub const BUCKETS_OWNED: &str = "streaming_hub_destination_buckets_owned";
    /// Live replicas this replica sees in the store (itself included), `{role}`: `delivery`
    /// for those that deliver, `other` for the rest.
    pub const REPLICAS_LIVE: &str = "streaming_hub_replicas_live";
    /// 1 while no transform worker can be started (`/readyz` answers 503 then).
    pub const TRANSFORM_WORKERS_UNAVAILABLE: &str = "streaming_hub_transform_workers_unavailable";
    /// Runs of light handlers stopped at their CPU budget and run once more on a fresh runtime.
    pub const TRANSFORM_RUNS_AGAIN: &str = "streaming_hub_transform_runs_again_total";
}

/// The transform pool's state as gauges and counters (read when `/metrics` is scraped).
pub fn transform_workers(health: &hub_transform::Health) {
    metrics::gauge!(metric::TRANSFORM_WORKERS, "state" => "alive").set(health.alive as f64);
    metrics::gauge!(metric::TRANSFORM_WORKERS, "state" => "busy").set(health.busy as f64);
    metrics::gauge!(metric::TRANSFORM_WAITING).set(health.waiting as f64);
    for (reason, n) in [("cpu", health.killed_cpu), ("wall", health.killed_wall), ("crashed", health.crashed)] {
        metrics::counter!(metric::TRANSFORM_WORKERS_STOPPED, "reason" => reason).absolute(n);
    }
    metrics::gauge!(metric::TRANSFORM_WORKERS_UNAVAILABLE).set(if health.cannot_start.is_some() { 1.0 } else { 0.0 });
    metrics::counter!(metric::TRANSFORM_RUNS_AGAIN).absolute(health.ran_again);
}

/// Sets `streaming_hub_delivery_stalled{reason}`: 1 for the reason delivery is stalled, 0 for
/// the other.
pub fn delivery_stall(stall: Option<crate::delivery::Stall>) {
    use crate::delivery::Stall;
    for (reason, which) in [("loop", Stall::Loop), ("slots", Stall::Slots)] {
        metrics::gauge!(metric::DELIVERY_STALLED, "reason" => reason).set(if stall == Some(which) { 1.0 } else { 0.0 });
    }
}

/// The label of a failed attempt's kind.
pub fn failure_kind(kind: hub_sinks::FailureKind, status: Option<u16>) -> &'static str {
    use hub_sinks::FailureKind as K;
    match (kind, status) {
        (K::Timeout, _) => "timeout",
        (K::Unreachable, _) => "connect",
        (K::Unauthorized, _) => "unauthorized",
        (K::Forbidden, _) => "forbidden",
        (K::Refused, Some(s)) if (400..500).contains(&s) => "4xx",
        (K::Refused, Some(s)) if s >= 500 => "5xx",
        (K::Refused, _) => "refused",
        (K::Transform, _) => "transform_failed",
    }
}

/// Every failure-kind label, for pre-registration.
pub const FAILURE_KINDS: [&str; 8] =
    ["timeout", "connect", "4xx", "5xx", "refused", "unauthorized", "forbidden", "transform_failed"];

/// Reports panics through the log (one structured line, in JSON outside `local`) instead of the
/// bare standard-error text: a panic contained where it happened (a Kafka header rdkafka could not
/// read) is still seen, and one that ends a task is seen before the supervisor reports the task.
pub fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        tracing::error!(location = %location, message = %message, "panic");
    }));
}

/// Installs the log subscriber — JSON unless `local`; `STREAMING_HUB_LOG` (or `RUST_LOG`) sets
/// the filter, `default` otherwise — and, when `traces` asks for it, the OTLP span exporter
/// (`crate::trace`), whose handle is returned to be shut down at exit. Call before the async
/// runtime starts.
pub fn init(
    json: bool,
    filter: Option<&str>,
    default: &str,
    traces: &crate::trace::Wanted,
) -> Result<Option<crate::trace::Exporter>, String> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let filter = filter
        .and_then(|f| EnvFilter::try_new(f).ok())
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new(default))
        // The trace spans are for the exporter; the logs keep their own spans.
        .add_directive(format!("{}=off", crate::trace::TARGET).parse().map_err(|e| format!("log filter: {e}"))?);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt: Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync> = if json {
        Box::new(fmt.json().flatten_event(true).with_current_span(true).with_span_list(false))
    } else {
        Box::new(fmt)
    };
    let (otel, exporter) = match crate::trace::start(traces)? {
        Some((layer, exporter)) => (Some(layer), Some(exporter)),
        None => (None, None),
    };
    let result = tracing_subscriber::registry().with(fmt.with_filter(filter)).with(otel).try_init();
    // A second call (tests start several hubs in one process) keeps the first subscriber.
    drop(result);
    Ok(exporter)
}

/// Logs only, for processes that export no traces.
pub fn init_logs(json: bool, filter: Option<&str>, default: &str) {
    // Without traces nothing can fail.
    let _ = init(json, filter, default, &crate::trace::Wanted::Off);
}

/// The process-wide Prometheus recorder.
pub fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let buckets =
            [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(metric::ATTEMPT_SECONDS.to_owned()), &buckets)
            .and_then(|b| b.set_buckets_for_metric(Matcher::Full(metric::INGEST_WRITE_SECONDS.to_owned()), &buckets))
            .unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        // Fails only if another recorder was installed first, in which case ours stays unused.
        drop(metrics::set_global_recorder(recorder));
        describe();
        handle
    })
}

fn describe() {
    metrics::describe_counter!(metric::INGEST_RECORDS, "Records ingested, by verdict");
    metrics::describe_counter!(metric::MANIFEST_FETCHES, "Producer manifest fetches, by result");
    metrics::describe_gauge!(metric::MANIFEST_SOURCES_FAILING, "Manifest sources whose last fetch failed");
    metrics::describe_counter!(
        metric::PAYLOAD_SCHEMA_MISMATCHES,
        "Event bodies that did not satisfy their declared JSON Schema, by mode"
    );
    metrics::describe_counter!(metric::PULL_READS, "Pull reads, by outcome (served, rate_limited)");
    metrics::describe_counter!(metric::PULL_EVENTS, "Events returned by pull reads");
    metrics::describe_counter!(metric::DELIVERY_ATTEMPTS, "Delivery attempts, by sink and outcome");
    metrics::describe_histogram!(metric::ATTEMPT_SECONDS, metrics::Unit::Seconds, "Delivery attempt latency, by sink");
    metrics::describe_counter!(metric::JOBS_DEAD, "Jobs dead-lettered, by sink");
    metrics::describe_histogram!(
        metric::INGEST_WRITE_SECONDS,
        metrics::Unit::Seconds,
        "Ingest writes (a group of HTTP posts or a Kafka partition's batch), start to commit"
    );
    metrics::describe_counter!(metric::LEASES_RECOVERED, "Jobs recovered after their lease expired");
    metrics::describe_counter!(
        metric::JOBS_LEASED_AT_INGEST,
        "Jobs leased to this process's workers as its ingest wrote them (no claim)"
    );
    metrics::describe_gauge!(metric::IN_FLIGHT, "Delivery attempts in flight in this process");
    metrics::describe_counter!(
        metric::ALLOWANCE_CUTS,
        "Cuts of a destination's adaptive allowance of attempts in flight (429, 503, timeout)"
    );
    metrics::describe_counter!(metric::DESTINATION_PAUSES, "Destinations paused by a Retry-After");
    metrics::describe_counter!(metric::RATE_WAITS, "Times a subscription's jobs waited for its rate limit");
    metrics::describe_counter!(
        hub_store::FILTER_BUDGET_EXCEEDED,
        "Evaluations of a subscription's filters that used up their budget (no match), by tenant"
    );
    metrics::describe_counter!(metric::JOBS_POISONED, "Jobs dead-lettered as poison");
    metrics::describe_counter!(metric::BREAKER_TRANSITIONS, "Circuit breaker transitions, by new state");
    metrics::describe_counter!(metric::AUTO_DISABLED, "Subscriptions disabled automatically");
    metrics::describe_counter!(
        metric::OPERATIONAL_EVENTS,
        "Operational events by kind: queued, dropped (queue full) or lost (not written)"
    );
    metrics::describe_counter!(metric::DLQ_RECORDS, "Records stored by the DLQ plane");
    metrics::describe_gauge!(metric::DELIVERY_JOBS, "Delivery jobs by state");
    metrics::describe_gauge!(
        metric::ORDERING_BLOCKED_KEYS,
        "Ordering keys with deliveries waiting behind an earlier one (subscriptions ordered by key)"
    );
    metrics::describe_gauge!(metric::INBOX_EVENTS, "Events in the inbox (an estimate on PostgreSQL)");
    metrics::describe_counter!(metric::PRUNED, "Records deleted by retention, by kind");
    metrics::describe_gauge!(
        metric::RETENTION_DONE,
        "When this replica last finished a retention pass, by kind (Unix seconds)"
    );
    metrics::describe_gauge!(metric::CONSUMER_LAG, "Kafka consumer lag per partition, in records");
    metrics::describe_counter!(metric::DELIVERY_FAILURES, "Failed delivery attempts, by sink and failure kind");
    metrics::describe_counter!(metric::VERIFICATION_FAILURES, "Failed verification probes, by sink and failure kind");
    metrics::describe_gauge!(metric::OLDEST_PENDING_AGE, metrics::Unit::Seconds, "Age of the oldest due job");
    metrics::describe_gauge!(metric::BREAKERS, "Circuit breakers open or half-open in this process");
    metrics::describe_gauge!(metric::BUILD_INFO, "The build, by version");
    metrics::describe_gauge!(metric::STORE_CONNECTIONS, "The store's pooled connections, open and idle");
    metrics::describe_gauge!(metric::STORE_CONNECTIONS_MAX, "The most connections the store's pool may open");
    metrics::describe_gauge!(metric::STORE_UP, "1 when the last metrics refresh reached the store");
    metrics::describe_counter!(metric::HTTP_REFUSED_CONNECTIONS, "Connections refused over the connection cap");
    metrics::describe_histogram!(
        metric::TRANSFORM_SECONDS,
        metrics::Unit::Seconds,
        "Runs of subscriptions' transforms, their wait for a transform thread included"
    );
    metrics::describe_counter!(metric::TRANSFORM_RUNS, "Runs of subscriptions' transforms, by result");
    metrics::describe_gauge!(metric::TRANSFORM_WORKERS, "Transform worker processes, alive and busy");
    metrics::describe_gauge!(metric::TRANSFORM_WAITING, "Transform runs waiting for a worker");
    metrics::describe_counter!(metric::ATTEMPT_PANICS, "Attempts that panicked, recorded as failures");
    metrics::describe_counter!(metric::LEDGER_CHECKPOINTS, "Ledger checkpoints this replica signed");
    metrics::describe_counter!(
        metric::LEDGER_REFUSED,
        "Ledger seals refused: an entry no longer matches what was appended"
    );
    metrics::describe_counter!(metric::LEDGER_UNRECORDED, "Changes that could not be appended to the ledger");
    metrics::describe_counter!(metric::HTTP_PANICS, "Requests whose handler panicked, answered 500");
    metrics::describe_counter!(metric::SSO_REFUSALS, "People's tokens refused, by reason");
    metrics::describe_counter!(metric::CONSOLE_SIGN_INS, "Console sign-ins through the identity provider, by outcome");
    metrics::describe_counter!(
        metric::SSO_KEY_FETCH_FAILURES,
        "Fetches of an identity provider's discovery document or keys that failed, by issuer"
    );
    metrics::describe_gauge!(metric::DELIVERY_STALLED, "1 while this replica's delivery makes no progress, by reason");
    metrics::describe_counter!(metric::TRANSFORM_WORKERS_STOPPED, "Transform workers stopped, by reason");
    metrics::describe_gauge!(metric::BUCKETS_OWNED, "Destination buckets this replica paces, of 1024");
    metrics::describe_gauge!(metric::REPLICAS_LIVE, "Live replicas this replica sees, by role");
    metrics::describe_gauge!(metric::TRANSFORM_WORKERS_UNAVAILABLE, "1 while no transform worker can be started");
    metrics::describe_counter!(
        metric::TRANSFORM_RUNS_AGAIN,
        "Runs of light handlers stopped at their CPU budget and run once more on a fresh runtime"
    );
    // Every series an alert reads exists from start, at zero.
    metrics::gauge!(
        metric::BUILD_INFO,
        "version" => env!("CARGO_PKG_VERSION"),
        "revision" => env!("HUB_BUILD_REVISION"),
        "build_date" => env!("HUB_BUILD_DATE")
    )
    .set(1.0);
    metrics::gauge!(metric::OLDEST_PENDING_AGE).set(0.0);
    metrics::gauge!(metric::ORDERING_BLOCKED_KEYS).set(0.0);
    for state in ["open", "half_open"] {
        metrics::gauge!(metric::BREAKERS, "state" => state).set(0.0);
    }
    for to in ["open", "half_open", "closed"] {
        metrics::counter!(metric::BREAKER_TRANSITIONS, "to" => to).increment(0);
    }
    metrics::counter!(metric::AUTO_DISABLED).increment(0);
    metrics::counter!(metric::ATTEMPT_PANICS).increment(0);
    metrics::counter!(metric::LEDGER_CHECKPOINTS).increment(0);
    metrics::counter!(metric::LEDGER_REFUSED).increment(0);
    metrics::counter!(metric::LEDGER_UNRECORDED).increment(0);
    metrics::counter!(metric::SSO_REFUSALS).increment(0);
    metrics::counter!(metric::CONSOLE_SIGN_INS).increment(0);
    metrics::counter!(metric::SSO_KEY_FETCH_FAILURES).increment(0);
    metrics::counter!(metric::HTTP_PANICS).increment(0);
    delivery_stall(None);
    metrics::counter!(metric::LEASES_RECOVERED).increment(0);
    metrics::counter!(metric::JOBS_POISONED).increment(0);
    metrics::counter!(metric::HTTP_REFUSED_CONNECTIONS).increment(0);
    metrics::counter!(metric::DLQ_RECORDS).increment(0);
    for sink in hub_sinks::registry::push_names() {
        for outcome in ["delivered", "failed", "skipped"] {
            metrics::counter!(metric::DELIVERY_ATTEMPTS, "sink" => sink, "outcome" => outcome).increment(0);
        }
        metrics::counter!(metric::JOBS_DEAD, "sink" => sink).increment(0);
        for kind in FAILURE_KINDS {
            metrics::counter!(metric::DELIVERY_FAILURES, "sink" => sink, "kind" => kind).increment(0);
        }
    }
    for result in ["transformed", "skipped", "failed"] {
        metrics::counter!(metric::TRANSFORM_RUNS, "result" => result).increment(0);
    }
    for outcome in ["served", "rate_limited"] {
        metrics::counter!(metric::PULL_READS, "outcome" => outcome).increment(0);
    }
    for verdict in ["accepted", "duplicate", "discarded", "quarantined"] {
        metrics::counter!(metric::INGEST_RECORDS, "verdict" => verdict).increment(0);
    }
    // The families the dashboard and the alerts read (deploy/), each with its known label values,
    // from the first scrape: a panel is never blank and an `absent()` alert never fires only
    // because nothing happened yet since a restart. The store's are refreshed at once by
    // `job_gauges`; until then the store is taken as up (the hub serves only once it reached it).
    metrics::gauge!(metric::STORE_UP).set(1.0);
    for state in ["open", "idle"] {
        metrics::gauge!(metric::STORE_CONNECTIONS, "state" => state).set(0.0);
    }
    metrics::gauge!(metric::STORE_CONNECTIONS_MAX).set(0.0);
    for state in hub_store::JobState::ALL {
        metrics::gauge!(metric::DELIVERY_JOBS, "state" => state.as_str()).set(0.0);
    }
    metrics::gauge!(metric::IN_FLIGHT).set(0.0);
    metrics::counter!(metric::ALLOWANCE_CUTS).increment(0);
    metrics::counter!(metric::DESTINATION_PAUSES).increment(0);
    metrics::counter!(metric::RATE_WAITS).increment(0);
    metrics::counter!(metric::JOBS_LEASED_AT_INGEST).increment(0);
    for sink in hub_sinks::registry::push_names() {
        // A histogram with no sample yet is exported with its buckets at zero.
        let _ = metrics::histogram!(metric::ATTEMPT_SECONDS, "sink" => sink);
        for kind in FAILURE_KINDS {
            metrics::counter!(metric::VERIFICATION_FAILURES, "sink" => sink, "kind" => kind).increment(0);
        }
    }
    let _ = metrics::histogram!(metric::INGEST_WRITE_SECONDS);
}

/// Refreshes `streaming_hub_delivery_jobs{state}` and `streaming_hub_inbox_events` every
/// `interval` until `shutdown`.
pub async fn job_gauges(
    store: std::sync::Arc<dyn hub_store::Store>,
    interval: std::time::Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        let connections = store.connections();
        metrics::gauge!(metric::STORE_CONNECTIONS, "state" => "open").set(f64::from(connections.open));
        metrics::gauge!(metric::STORE_CONNECTIONS, "state" => "idle").set(f64::from(connections.idle));
        metrics::gauge!(metric::STORE_CONNECTIONS_MAX).set(f64::from(connections.max));
        let counted = store.job_counts().await;
        metrics::gauge!(metric::STORE_UP).set(if counted.is_ok() { 1.0 } else { 0.0 });
        match counted {
            Ok(counts) => {
                for state in hub_store::JobState::ALL {
                    let n = counts.iter().find(|(s, _)| *s == state).map_or(0, |(_, n)| *n);
                    metrics::gauge!(metric::DELIVERY_JOBS, "state" => state.as_str()).set(n as f64);
                }
            }
            Err(e) => tracing::warn!(error = %e, "counting jobs for metrics failed"),
        }
        match store.oldest_due_pending(chrono::Utc::now()).await {
            Ok(oldest) => {
                let age = oldest.map_or(0.0, |t| (chrono::Utc::now() - t).num_milliseconds().max(0) as f64 / 1000.0);
                metrics::gauge!(metric::OLDEST_PENDING_AGE).set(age);
            }
            Err(e) => tracing::warn!(error = %e, "reading the oldest due job for metrics failed"),
        }
        match store.count_blocked_keys().await {
            Ok(n) => metrics::gauge!(metric::ORDERING_BLOCKED_KEYS).set(n as f64),
            Err(e) => tracing::warn!(error = %e, "counting blocked ordering keys for metrics failed"),
        }
        match store.inbox_size().await {
            Ok(n) => metrics::gauge!(metric::INBOX_EVENTS).set(n as f64),
            Err(e) => tracing::warn!(error = %e, "sizing the inbox for metrics failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

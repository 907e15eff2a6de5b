//! The variables this hub reads, their bounds, and the reader that takes each from the
//! environment once, collecting every problem rather than stopping at the first.

use std::collections::HashMap;
use std::time::Duration;

use super::Problem;
use super::values::{parse_duration, quoted};

/// Variables this hub reads. Anything else with the prefix is reported as ignored.
pub(super) const KNOWN: &[&str] = &[
    "STREAMING_HUB_ENV",
    "STREAMING_HUB_ROLE",
    "STREAMING_HUB_HTTP_LISTEN_ADDR",
    "STREAMING_HUB_POSTGRES_DSN",
    "STREAMING_HUB_POSTGRES_SCHEMA",
    "STREAMING_HUB_POSTGRES_MAX_CONNECTIONS",
    "STREAMING_HUB_POSTGRES_MAX_IDLE_CONNS",
    "STREAMING_HUB_POSTGRES_CONN_MAX_LIFETIME",
    "STREAMING_HUB_SQLITE_PATH",
    "STREAMING_HUB_ADMIN_TOKEN",
    "STREAMING_HUB_TENANT_ID",
    "STREAMING_HUB_TENANTS",
    "STREAMING_HUB_KAFKA_BROKERS",
    "STREAMING_HUB_KAFKA_GROUP_ID",
    "STREAMING_HUB_KAFKA_DLQ_GROUP_ID",
    "STREAMING_HUB_KAFKA_CLIENT_ID",
    "STREAMING_HUB_KAFKA_SCRAM_USERNAME",
    "STREAMING_HUB_KAFKA_SCRAM_PASSWORD",
    "STREAMING_HUB_KAFKA_SCRAM_MECHANISM",
    "STREAMING_HUB_KAFKA_TLS_ENABLED",
    "STREAMING_HUB_KAFKA_CA_CERT",
    "STREAMING_HUB_KAFKA_SESSION_TIMEOUT",
    "STREAMING_HUB_KAFKA_BATCH_SIZE",
    "STREAMING_HUB_KAFKA_BATCH_WAIT",
    "STREAMING_HUB_KAFKA_TOPIC_REFRESH",
    "STREAMING_HUB_KAFKA_OUTAGE_LOG_INTERVAL",
    "STREAMING_HUB_DLQ_ENABLED",
    "STREAMING_HUB_DISPATCH_WORKERS",
    "STREAMING_HUB_MAX_IN_FLIGHT",
    "STREAMING_HUB_TENANT_IN_FLIGHT_SHARE",
    "STREAMING_HUB_FILTER_BUDGET",
    "STREAMING_HUB_DISPATCH_CLAIM_BATCH",
    "STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS",
    "STREAMING_HUB_DISPATCH_LEASE",
    "STREAMING_HUB_DISPATCH_STALL_TIMEOUT",
    "STREAMING_HUB_BREAKER_FAILURES",
    "STREAMING_HUB_BREAKER_COOLDOWN",
    "STREAMING_HUB_BREAKER_MAX_COOLDOWN",
    "STREAMING_HUB_POISON_THRESHOLD",
    "STREAMING_HUB_RETRY_CURVE",
    "STREAMING_HUB_RETRY_DEADLINE",
    "STREAMING_HUB_PULL_RATE",
    "STREAMING_HUB_PULL_BURST",
    "STREAMING_HUB_REPLAY_RATE",
    "STREAMING_HUB_AUTODISABLE_ENABLED",
    "STREAMING_HUB_AUTODISABLE_FAILURE_WINDOW",
    "STREAMING_HUB_AUTODISABLE_FAILURE_SPREAD",
    "STREAMING_HUB_DLQ_RETENTION",
    "STREAMING_HUB_DLQ_PRUNE_INTERVAL",
    "STREAMING_HUB_QUARANTINE_RETENTION",
    "STREAMING_HUB_JOB_RETENTION",
    "STREAMING_HUB_EVENT_RETENTION",
    "STREAMING_HUB_PRUNE_INTERVAL",
    "STREAMING_HUB_ALLOW_PRIVATE_SINKS",
    "STREAMING_HUB_AWS_DEFAULT_CREDENTIALS",
    "STREAMING_HUB_AWS_ENDPOINT_URL",
    "STREAMING_HUB_OIDC_ISSUER",
    "STREAMING_HUB_OIDC_KEY_OVERLAP",
    "STREAMING_HUB_LEDGER_CHECKPOINT_INTERVAL",
    "STREAMING_HUB_LEDGER_RETENTION",
    "STREAMING_HUB_SSO_ISSUERS",
    "STREAMING_HUB_SSO_AUDIENCE",
    "STREAMING_HUB_SSO_ROLES_CLAIM",
    "STREAMING_HUB_SSO_KEYS_REFRESH",
    "STREAMING_HUB_SSO_CONSOLE_CLIENT_ID",
    "STREAMING_HUB_SSO_CONSOLE_CLIENT_SECRET",
    "STREAMING_HUB_SSO_SESSION_TTL",
    "STREAMING_HUB_ERASURE_PAGE",
    "STREAMING_HUB_ERASURE_MAX_UNCONFIRMED",
    "STREAMING_HUB_TRANSFORM_CPU",
    "STREAMING_HUB_TRANSFORM_MEMORY",
    "STREAMING_HUB_TRANSFORM_THREADS",
    "STREAMING_HUB_KEK_REF",
    "STREAMING_HUB_DEV_KEK",
    "STREAMING_HUB_SHUTDOWN_TIMEOUT",
    "STREAMING_HUB_DRAIN_DELAY",
    "STREAMING_HUB_HTTP_MAX_CONNECTIONS",
    "STREAMING_HUB_MAX_SUBSCRIPTIONS_PER_TENANT",
    "STREAMING_HUB_MAX_PATTERNS_PER_SUBSCRIPTION",
    "STREAMING_HUB_INGEST_RATE",
    "STREAMING_HUB_INGEST_BURST",
    "STREAMING_HUB_HTTP_HEADER_TIMEOUT",
    "STREAMING_HUB_HTTP_REQUEST_TIMEOUT",
    "STREAMING_HUB_METRICS_INTERVAL",
    "STREAMING_HUB_MANIFEST_SOURCES",
    "STREAMING_HUB_MANIFEST_REFRESH_INTERVAL",
    "STREAMING_HUB_VALIDATE_PAYLOADS",
    "STREAMING_HUB_PUBLIC_URL",
    "STREAMING_HUB_PORTAL_FRAME_ANCESTORS",
    "STREAMING_HUB_LOG",
];

/// The original deployment's names for settings this hub names otherwise: `(alias, name)`. An
/// alias is read when its name is not set; both set to different values is refused.
pub const ALIASES: [(&str, &str); 4] = [
    ("STREAMING_HUB_LOG_LEVEL", "STREAMING_HUB_LOG"),
    ("STREAMING_HUB_POSTGRES_MAX_OPEN_CONNS", "STREAMING_HUB_POSTGRES_MAX_CONNECTIONS"),
    ("STREAMING_HUB_PRE_STOP_DRAIN_TIMEOUT", "STREAMING_HUB_DRAIN_DELAY"),
    ("STREAMING_HUB_DLQ_GROUP", "STREAMING_HUB_KAFKA_DLQ_GROUP_ID"),
];

/// How long a value may be, in bytes: every setting is short, but for a CA certificate bundle.
/// A longer one is refused (and never echoed), so a stray value cannot fill the log or memory.
fn max_value_len(name: &str) -> usize {
    match name {
        "STREAMING_HUB_KAFKA_CA_CERT" => 256 * 1024,
        _ => 4096,
    }
}

/// Settings whose absence chooses a mode of its own (`local`, the embedded store, no Kafka, no
/// key): set to an empty value they are refused, never taken for unset, since an empty value
/// usually means a deployment lost what it meant to put there.
const NOT_EMPTY: &[&str] = &[
    "STREAMING_HUB_ENV",
    "STREAMING_HUB_POSTGRES_DSN",
    "STREAMING_HUB_KAFKA_BROKERS",
    "STREAMING_HUB_ADMIN_TOKEN",
    "STREAMING_HUB_KEK_REF",
    "STREAMING_HUB_DEV_KEK",
];

/// The admin token's length, in bytes.
pub(super) const ADMIN_TOKEN_LEN: std::ops::RangeInclusive<usize> = 16..=1024;

/// Refuses what no setting may be (too long, or empty where empty means something else) before
/// anything is read; the variable is removed, so nothing further reads or echoes its value.
pub(super) fn bounded(vars: &mut HashMap<String, String>) -> Vec<Problem> {
    let mut problems = Vec::new();
    let named: Vec<String> = vars
        .keys()
        .filter(|k| KNOWN.contains(&k.as_str()) || ALIASES.iter().any(|(alias, _)| alias == k))
        .cloned()
        .collect();
    for name in named {
        let Some(value) = vars.get(&name) else { continue };
        let max = max_value_len(&name);
        if value.len() > max {
            problems.push(Problem {
                variable: name.clone(),
                message: format!("is {} bytes long; at most {max} are accepted", value.len()),
            });
            vars.remove(&name);
        } else if value.trim().is_empty() && NOT_EMPTY.contains(&name.as_str()) {
            problems.push(Problem {
                variable: name.clone(),
                message: "is set but empty: give it a value, or unset it for the default".to_owned(),
            });
            vars.remove(&name);
        }
    }
    problems
}

/// Reads typed values and collects every problem.
pub(super) struct Reader<'a> {
    pub(super) vars: &'a HashMap<String, String>,
    pub(super) problems: Vec<Problem>,
}

impl Reader<'_> {
    pub(super) fn raw(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    pub(super) fn problem(&mut self, name: &str, message: impl Into<String>) {
        self.problems.push(Problem { variable: name.to_owned(), message: message.into() });
    }

    pub(super) fn parse<T>(&mut self, name: &str, default: T, parse: impl FnOnce(&str) -> Result<T, String>) -> T {
        match self.raw(name) {
            None => default,
            Some(raw) => match parse(raw) {
                Ok(v) => v,
                Err(message) => {
                    self.problem(name, message);
                    default
                }
            },
        }
    }

    pub(super) fn number(&mut self, name: &str, default: u32, min: u32, max: u32) -> u32 {
        self.parse(name, default, |raw| match raw.parse::<u32>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(format!("must be a whole number from {min} to {max} (got {})", quoted(raw))),
        })
    }

    pub(super) fn flag(&mut self, name: &str, default: bool) -> bool {
        self.parse(name, default, |raw| match raw.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Ok(true),
            "false" | "0" | "no" => Ok(false),
            _ => Err(format!("must be true or false (got {})", quoted(raw))),
        })
    }

    pub(super) fn duration(&mut self, name: &str, default: &str) -> Duration {
        let fallback = parse_duration(default).unwrap_or_default();
        self.parse(name, fallback, parse_duration)
    }

    pub(super) fn text(&mut self, name: &str) -> Option<String> {
        self.raw(name).map(str::to_owned)
    }
}

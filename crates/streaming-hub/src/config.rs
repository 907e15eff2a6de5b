//! Typed configuration, read once at start from `STREAMING_HUB_*` environment variables.
//!
//! Every problem is reported at once, each naming its variable. Variables of the original
//! deployments that this hub does not use are accepted and reported as ignored, so existing
//! deployment charts can drive this binary unchanged.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use hub_core::TenantId;

pub mod dsn;
pub mod file;
mod names;
mod values;

pub use names::ALIASES;
use names::{ADMIN_TOKEN_LEN, KNOWN, Reader, bounded};
pub use values::{PayloadValidation, parse_duration, quoted};
use values::{frame_ancestors, manifest_sources, memory_size, oidc_issuer, roles_claim, sso_issuers};

/// A secret value: never printed by `Debug` or `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// The deployment environment. Only `local` and `production` change behaviour; any other name
/// (such as `staging`) behaves like production minus its start-up refusals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment(String);

impl Environment {
    pub fn is_local(&self) -> bool {
        self.0 == "local"
    }

    pub fn is_production(&self) -> bool {
        self.0 == "production"
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Which parts of the hub this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    All,
    Ingest,
    Delivery,
}

impl Role {
    pub fn ingests(self) -> bool {
        matches!(self, Role::All | Role::Ingest)
    }

    pub fn delivers(self) -> bool {
        matches!(self, Role::All | Role::Delivery)
    }
}

/// Where state is kept.
#[derive(Debug, Clone)]
pub enum Database {
    Sqlite {
        path: PathBuf,
    },
    Postgres {
        dsn: Secret,
        schema: Option<String>,
        pool: hub_store::PoolSettings,
        /// The driver will use TLS that cannot be downgraded (as it reads the DSN and `PGSSLMODE`).
        tls: bool,
    },
}

/// SASL/SCRAM credentials for Kafka.
#[derive(Debug, Clone)]
pub struct Scram {
    pub username: String,
    pub password: Secret,
    /// `SCRAM-SHA-512` or `SCRAM-SHA-256`.
    pub mechanism: String,
}

/// How to reach Kafka and how to consume it.
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    pub brokers: String,
    pub group_id: String,
    pub dlq_group_id: String,
    pub client_id: String,
    pub scram: Option<Scram>,
    pub tls: bool,
    pub ca_cert: Option<CaCert>,
    pub session_timeout: Duration,
    /// Records per partition written in one transaction.
    pub batch_size: usize,
    /// How long a partition's first buffered record waits for its batch to fill.
    pub batch_wait: Duration,
    /// How often topic metadata is refreshed, so new topics are picked up.
    pub topic_refresh: Duration,
    pub dlq_enabled: bool,
    /// How often librdkafka reports statistics (consumer lag).
    pub stats_interval: Duration,
    /// While the brokers are out of reach, how often the log says so again (the start and the
    /// end of an outage are said once each).
    pub outage_log_interval: Duration,
}

/// How erasures read the inbox, and which need their count confirmed.
#[derive(Debug, Clone, Copy)]
pub struct ErasureSettings {
    /// Inbox events an erasure reads and judges a page (`STREAMING_HUB_ERASURE_PAGE`; each
    /// page's matches written in one transaction).
    pub page: u32,
    /// An erasure selecting more events than this runs only with its count confirmed
    /// (`STREAMING_HUB_ERASURE_MAX_UNCONFIRMED`).
    pub max_unconfirmed: u64,
}

/// What one tenant may use.
#[derive(Debug, Clone, Copy)]
pub struct Quotas {
    pub subscriptions_per_tenant: u32,
    pub patterns_per_subscription: u32,
    /// Events per second a tenant may post over HTTP (token bucket, per process).
    pub ingest_rate: u32,
    pub ingest_burst: u32,
}

/// Limits of the HTTP server.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Connections served at once; one more is answered 503 and closed.
    pub max_connections: u32,
    /// A client must send a request's headers within this time (idle keep-alive included).
    pub header_timeout: Duration,
    /// A request must be answered within this time, body reading included.
    pub request_timeout: Duration,
}

/// The certificate authority Kafka brokers are checked against.
#[derive(Clone)]
pub enum CaCert {
    File(PathBuf),
    /// The PEM text itself.
    Pem(String),
}

impl std::fmt::Debug for CaCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "File({})", path.display()),
            Self::Pem(_) => f.write_str("Pem(..)"),
        }
    }
}

/// The whole configuration of one process.
#[derive(Debug, Clone)]
pub struct Config {
    pub env: Environment,
    pub role: Role,
    pub http_listen_addr: SocketAddr,
    /// Limits that keep the HTTP server answering under idle or hostile clients.
    pub http_limits: HttpLimits,
    pub database: Database,
    /// `None` in `local` when unset: one is generated at start.
    pub admin_token: Option<Secret>,
    /// Single-tenant mode: only this tenant's events are accepted.
    pub only_tenant: Option<TenantId>,
    /// A cell: the tenants this install serves (`STREAMING_HUB_TENANTS`); other tenants' records
    /// are skipped, their HTTP ingest refused.
    pub cell: Option<std::collections::BTreeSet<TenantId>>,
    /// Kafka ingest and the DLQ plane; `None` when no brokers are configured.
    pub kafka: Option<KafkaConfig>,
    /// Attempts in flight at once in this replica (`STREAMING_HUB_MAX_IN_FLIGHT`).
    pub max_in_flight: u32,
    /// The share of those slots one tenant may hold while another has jobs waiting.
    pub tenant_in_flight_share: f64,
    /// The work one subscription's filters may do on one event (`STREAMING_HUB_FILTER_BUDGET`).
    pub filter_budget: Duration,
    pub dispatch_claim_batch: u32,
    pub dispatch_idle_interval: Duration,
    /// How long a claimed job is held before it counts as abandoned; longer than any attempt.
    pub dispatch_lease: Duration,
    /// Delivery with no progress this long (every slot held and no attempt ending, or the
    /// dispatch loop not turning) makes `/readyz` answer 503 (`STREAMING_HUB_DISPATCH_STALL_TIMEOUT`).
    pub dispatch_stall_timeout: Duration,
    pub breaker_failures: u32,
    pub breaker_cooldown: Duration,
    pub breaker_max_cooldown: Duration,
    pub poison_threshold: u32,
    pub retry_curve: Vec<Duration>,
    pub retry_deadline: Duration,
    pub pull_rate: u32,
    pub pull_burst: u32,
    /// Events per second a replay gives its subscription when the request names no `rate`.
    pub replay_rate: u32,
    /// Per-tenant limits (SPEC §8).
    pub quotas: Quotas,
    pub autodisable_enabled: bool,
    pub autodisable_failure_window: Duration,
    pub autodisable_failure_spread: Duration,
    pub dlq_retention: Duration,
    pub dlq_prune_interval: Duration,
    pub quarantine_retention: Duration,
    /// Succeeded, dead and cancelled jobs, with their attempts.
    pub job_retention: Duration,
    /// Inbox events; never shorter than the longest retry window, and never one a job refers to.
    pub event_retention: Duration,
    pub prune_interval: Duration,
    pub allow_private_sinks: bool,
    /// SQS and EventBridge subscriptions without credentials use the default AWS provider chain.
    pub aws_default_credentials: bool,
    /// The AWS endpoint for SQS and EventBridge subscriptions that name none (an emulator, a VPC
    /// endpoint).
    pub aws_endpoint_url: Option<String>,
    /// The hub as an OIDC issuer (its URL, the tokens' `iss`): AWS destinations may then assume a
    /// role with its tokens, no key stored.
    pub oidc_issuer: Option<String>,
    /// After a rotation, how long the replaced signing key stays published.
    pub oidc_key_overlap: Duration,
    /// Identity providers people sign in with (`STREAMING_HUB_SSO_ISSUERS`); none: single sign-on
    /// is off.
    pub sso_issuers: Vec<String>,
    /// The `aud` their tokens must carry (`STREAMING_HUB_SSO_AUDIENCE`).
    pub sso_audience: Option<String>,
    /// Where the roles are in a token (`STREAMING_HUB_SSO_ROLES_CLAIM`).
    pub sso_roles_claim: String,
    /// How often each provider's keys are fetched again (`STREAMING_HUB_SSO_KEYS_REFRESH`).
    pub sso_keys_refresh: Duration,
    /// The console's client at the first provider (`STREAMING_HUB_SSO_CONSOLE_CLIENT_ID`); none:
    /// people sign in to the console with a token or key only.
    pub sso_console_client_id: Option<String>,
    /// Its secret, for a confidential client (`STREAMING_HUB_SSO_CONSOLE_CLIENT_SECRET`).
    pub sso_console_client_secret: Option<Secret>,
    /// How long a person's console session lasts (`STREAMING_HUB_SSO_SESSION_TTL`).
    pub sso_session_ttl: Duration,
    /// How often each log with new entries gets a signed checkpoint
    /// (`STREAMING_HUB_LEDGER_CHECKPOINT_INTERVAL`).
    pub ledger_checkpoint_interval: Duration,
    /// How long ledger entries are kept (`STREAMING_HUB_LEDGER_RETENTION`): never shorter than
    /// the jobs' and events' retention, so every attempt listed links to its entry.
    pub ledger_retention: Duration,
    /// What one run of a transformation may spend: CPU time and memory (bytes).
    pub transform_cpu: Duration,
    pub transform_memory: usize,
    /// Worker processes that run transformations, each driven by a thread of its own
    /// (`STREAMING_HUB_TRANSFORM_THREADS`; default: the cores).
    pub transform_threads: u32,
    /// The program run as a transform worker (`STREAMING_HUB_TRANSFORM_WORKER`; default: this
    /// hub's own executable, in its `transform-worker` mode).
    pub transform_worker: Option<std::path::PathBuf>,
    /// How erasures read the inbox and which need their count confirmed.
    pub erasure: ErasureSettings,
    pub kek_ref: Option<String>,
    pub dev_kek: Option<Secret>,
    pub shutdown_timeout: Duration,
    /// On SIGTERM, how long `/readyz` answers 503 before the hub stops taking work, so load
    /// balancers see it leave first.
    pub drain_delay: Duration,
    /// How often gauges that need a query (jobs by state, Kafka lag) are refreshed.
    pub metrics_interval: Duration,
    /// Producer manifests read into the event catalog (`http(s)` URLs and `file:` paths).
    pub manifest_sources: Vec<String>,
    pub manifest_refresh_interval: Duration,
    /// What an accepted event whose body does not satisfy its declared schema becomes.
    pub validate_payloads: PayloadValidation,
    /// Where operators and tenants reach the hub (portal URLs start with it); the request's own
    /// host when unset.
    pub public_url: Option<String>,
    /// The console's `frame-ancestors` sources: who may embed the portal.
    pub portal_frame_ancestors: String,
    /// The log filter (`STREAMING_HUB_LOG`, `tracing` directives such as `info,hub_store=debug`).
    pub log: Option<String>,
    /// `STREAMING_HUB_*` variables that were set but mean nothing to this hub.
    pub ignored: Vec<String>,
    /// Deprecated variables that were set, with what to do instead (warned at start).
    pub deprecated: Vec<(&'static str, &'static str)>,
}

/// One invalid variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub variable: String,
    pub message: String,
}

/// Every invalid variable found at start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError(pub Vec<Problem>);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid configuration:")?;
        for p in &self.0 {
            write!(f, "\n  {}: {}", p.variable, p.message)?;
        }
        Ok(())
    }
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(std::env::vars().collect())
    }

    /// What `migrate` needs: the database settings. Kafka and the admin token are left out, so a
    /// migration job needs neither (a placeholder token stands in for the one `serve` requires).
    pub fn for_migrate(mut vars: HashMap<String, String>) -> Result<Self, ConfigError> {
        vars.retain(|k, _| !k.starts_with("STREAMING_HUB_KAFKA_"));
        vars.entry("STREAMING_HUB_ADMIN_TOKEN".to_owned()).or_insert_with(|| "migrate-needs-no-admin-token".to_owned());
        Self::from_vars(vars)
    }

    /// Reads a set of variables (the environment, or a test's own map).
    pub fn from_vars(mut vars: HashMap<String, String>) -> Result<Self, ConfigError> {
        let mut alias_problems = Vec::new();
        for (alias, name) in ALIASES {
            let Some(value) = vars.get(alias).cloned() else { continue };
            match vars.get(name) {
                Some(set) if set.trim() != value.trim() => alias_problems.push(Problem {
                    variable: alias.to_owned(),
                    message: format!("names the same setting as {name}, which is set to another value: set one"),
                }),
                Some(_) => {}
                None => {
                    vars.insert(name.to_owned(), value);
                }
            }
        }
        alias_problems.extend(bounded(&mut vars));
        let mut r = Reader { vars: &vars, problems: alias_problems };

        let env = r.parse("STREAMING_HUB_ENV", Environment("local".into()), |raw| {
            // Anything else is refused, never taken for `local` (which generates secrets).
            match raw.to_ascii_lowercase().as_str() {
                e @ ("local" | "staging" | "production") => Ok(Environment(e.to_owned())),
                _ => Err(format!("must be local, staging or production (got {})", quoted(raw))),
            }
        });
        let role = r.parse("STREAMING_HUB_ROLE", Role::All, |raw| match raw {
            "all" => Ok(Role::All),
            "ingest" => Ok(Role::Ingest),
            "delivery" => Ok(Role::Delivery),
            _ => Err(format!("must be all, ingest or delivery (got {})", quoted(raw))),
        });
        let http_listen_addr =
            r.parse("STREAMING_HUB_HTTP_LISTEN_ADDR", SocketAddr::from(([127, 0, 0, 1], 8080)), |raw| {
                // `:8080`, as the original deployment writes it, listens on every interface.
                let full = if raw.starts_with(':') { format!("0.0.0.0{raw}") } else { raw.to_owned() };
                full.parse()
                    .map_err(|_| format!("must be an address such as 127.0.0.1:8080 or :8080 (got {})", quoted(raw)))
            });

        let pool = hub_store::PoolSettings {
            max_connections: r.number("STREAMING_HUB_POSTGRES_MAX_CONNECTIONS", 16, 1, 1000),
            min_connections: r.number("STREAMING_HUB_POSTGRES_MAX_IDLE_CONNS", 0, 0, 1000),
            max_lifetime: match r.duration("STREAMING_HUB_POSTGRES_CONN_MAX_LIFETIME", "30m") {
                d if d.is_zero() => None,
                d => Some(d),
            },
        };
        let schema = r.parse("STREAMING_HUB_POSTGRES_SCHEMA", None, |raw| {
            let valid = raw.len() <= 63
                && raw.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
                && raw.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if valid { Ok(Some(raw.to_owned())) } else { Err("must be a lowercase SQL identifier".to_owned()) }
        });
        let pg_root_cert = std::env::var("PGSSLROOTCERT").ok();
        let database = match r.text("STREAMING_HUB_POSTGRES_DSN") {
            Some(raw) => match dsn::parse(&raw, pg_root_cert.as_deref()) {
                Ok(parsed) => {
                    if let Some(problem) = dsn::root_cert_problem(&parsed) {
                        r.problem("STREAMING_HUB_POSTGRES_DSN", problem);
                    }
                    Database::Postgres { dsn: Secret(raw), schema, pool, tls: parsed.tls_required() }
                }
                Err(problem) => {
                    r.problem("STREAMING_HUB_POSTGRES_DSN", problem);
                    Database::Sqlite { path: PathBuf::new() }
                }
            },
            None => Database::Sqlite {
                path: r
                    .text("STREAMING_HUB_SQLITE_PATH")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| "./streaming-hub.db".into()),
            },
        };

        // Outside `local` an admin token is optional when admin keys exist (checked at start,
        // where the database is known: `crate::start`).
        let admin_token = r.text("STREAMING_HUB_ADMIN_TOKEN").map(Secret);
        if admin_token.as_ref().is_some_and(|token| !ADMIN_TOKEN_LEN.contains(&token.0.len())) {
            r.problem(
                "STREAMING_HUB_ADMIN_TOKEN",
                format!("must be {} to {} bytes long", ADMIN_TOKEN_LEN.start(), ADMIN_TOKEN_LEN.end()),
            );
        }

        let only_tenant = r.parse("STREAMING_HUB_TENANT_ID", None, |raw| {
            if raw == "default" {
                return Ok(None);
            }
            TenantId::parse(raw).map(Some).map_err(|e| e.to_string())
        });
        let cell = r.parse("STREAMING_HUB_TENANTS", None, |raw| {
            let mut cell = std::collections::BTreeSet::new();
            for (i, item) in raw.split(',').map(str::trim).enumerate() {
                let tenant = TenantId::parse(item).map_err(|e| format!("entry {} ({}): {e}", i + 1, quoted(item)))?;
                cell.insert(tenant);
            }
            Ok(Some(cell))
        });
        if only_tenant.is_some() && cell.is_some() {
            r.problem(
                "STREAMING_HUB_TENANTS",
                "a cell's tenants and single-tenant mode (STREAMING_HUB_TENANT_ID) exclude each other: set one",
            );
        }

        let retry_curve = r.parse("STREAMING_HUB_RETRY_CURVE", default_retry_curve(), |raw| {
            let curve: Result<Vec<Duration>, String> = raw.split(',').map(|d| parse_duration(d.trim())).collect();
            match curve {
                Ok(c) if !c.is_empty() && c.len() <= 100 => Ok(c),
                Ok(_) => Err("must list from 1 to 100 delays".to_owned()),
                Err(e) => Err(format!("each delay {e}")),
            }
        });

        // `STREAMING_HUB_DISPATCH_WORKERS` was the fixed worker count; it now names the same bound
        // as `STREAMING_HUB_MAX_IN_FLIGHT` (attempts in flight), read when that is unset.
        let mut deprecated = Vec::new();
        let max_in_flight = match (r.raw("STREAMING_HUB_MAX_IN_FLIGHT"), r.raw("STREAMING_HUB_DISPATCH_WORKERS")) {
            (Some(_), Some(_)) => {
                let n = r.number("STREAMING_HUB_MAX_IN_FLIGHT", 2048, 1, 65_536);
                r.problem(
                    "STREAMING_HUB_DISPATCH_WORKERS",
                    "is the deprecated name of STREAMING_HUB_MAX_IN_FLIGHT, which is set too: unset it",
                );
                n
            }
            (None, Some(_)) => {
                deprecated.push((
                    "STREAMING_HUB_DISPATCH_WORKERS",
                    "deprecated: it now bounds attempts in flight; set STREAMING_HUB_MAX_IN_FLIGHT instead",
                ));
                r.number("STREAMING_HUB_DISPATCH_WORKERS", 2048, 1, 65_536)
            }
            _ => r.number("STREAMING_HUB_MAX_IN_FLIGHT", 2048, 1, 65_536),
        };

        let kafka = kafka_config(&mut r, &env);
        let config = Config {
            deprecated,
            role,
            http_listen_addr,
            http_limits: HttpLimits {
                max_connections: r.number("STREAMING_HUB_HTTP_MAX_CONNECTIONS", 1024, 1, 1_000_000),
                header_timeout: r.duration("STREAMING_HUB_HTTP_HEADER_TIMEOUT", "10s"),
                request_timeout: r.duration("STREAMING_HUB_HTTP_REQUEST_TIMEOUT", "60s"),
            },
            database,
            admin_token,
            only_tenant,
            cell,
            kafka,
            max_in_flight,
            filter_budget: r.parse(
                "STREAMING_HUB_FILTER_BUDGET",
                Duration::from_millis(1),
                |raw| match parse_duration(raw) {
                    Ok(d) if d >= Duration::from_micros(10) && d <= Duration::from_secs(1) => Ok(d),
                    Ok(_) => Err(format!("must be from 10us to 1s (got {})", quoted(raw))),
                    Err(e) => Err(e),
                },
            ),
            tenant_in_flight_share: r.parse("STREAMING_HUB_TENANT_IN_FLIGHT_SHARE", 0.5, |raw| {
                match raw.parse::<f64>() {
                    Ok(share) if share > 0.0 && share <= 1.0 => Ok(share),
                    _ => Err(format!("must be a number above 0 and at most 1, such as 0.5 (got {})", quoted(raw))),
                }
            }),
            dispatch_claim_batch: r.number("STREAMING_HUB_DISPATCH_CLAIM_BATCH", 16, 1, 1000),
            dispatch_idle_interval: Duration::from_millis(u64::from(r.number(
                "STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS",
                250,
                1,
                600_000,
            ))),
            dispatch_lease: r.duration("STREAMING_HUB_DISPATCH_LEASE", "90s"),
            dispatch_stall_timeout: r.duration("STREAMING_HUB_DISPATCH_STALL_TIMEOUT", "2m"),
            breaker_failures: r.number("STREAMING_HUB_BREAKER_FAILURES", 5, 1, 10_000),
            breaker_cooldown: r.duration("STREAMING_HUB_BREAKER_COOLDOWN", "30s"),
            breaker_max_cooldown: r.duration("STREAMING_HUB_BREAKER_MAX_COOLDOWN", "10m"),
            poison_threshold: r.number("STREAMING_HUB_POISON_THRESHOLD", 5, 1, 1000),
            retry_curve,
            retry_deadline: r.duration("STREAMING_HUB_RETRY_DEADLINE", "24h"),
            pull_rate: r.number("STREAMING_HUB_PULL_RATE", 100, 1, 1_000_000),
            pull_burst: r.number("STREAMING_HUB_PULL_BURST", 200, 1, 1_000_000),
            replay_rate: r.number("STREAMING_HUB_REPLAY_RATE", 250, 1, hub_core::replay::MAX_RATE),
            quotas: Quotas {
                subscriptions_per_tenant: r.number("STREAMING_HUB_MAX_SUBSCRIPTIONS_PER_TENANT", 500, 1, 1_000_000),
                patterns_per_subscription: r.number("STREAMING_HUB_MAX_PATTERNS_PER_SUBSCRIPTION", 32, 1, 1000),
                ingest_rate: r.number("STREAMING_HUB_INGEST_RATE", 1000, 1, 10_000_000),
                ingest_burst: r.number("STREAMING_HUB_INGEST_BURST", 2000, 1, 10_000_000),
            },
            autodisable_enabled: r.flag("STREAMING_HUB_AUTODISABLE_ENABLED", true),
            autodisable_failure_window: r.duration("STREAMING_HUB_AUTODISABLE_FAILURE_WINDOW", "120h"),
            autodisable_failure_spread: r.duration("STREAMING_HUB_AUTODISABLE_FAILURE_SPREAD", "12h"),
            dlq_retention: r.duration("STREAMING_HUB_DLQ_RETENTION", "168h"),
            dlq_prune_interval: r.duration("STREAMING_HUB_DLQ_PRUNE_INTERVAL", "1h"),
            quarantine_retention: r.duration("STREAMING_HUB_QUARANTINE_RETENTION", "168h"),
            job_retention: r.duration("STREAMING_HUB_JOB_RETENTION", "168h"),
            event_retention: r.duration("STREAMING_HUB_EVENT_RETENTION", "168h"),
            prune_interval: r.duration("STREAMING_HUB_PRUNE_INTERVAL", "1h"),
            allow_private_sinks: r.flag("STREAMING_HUB_ALLOW_PRIVATE_SINKS", false),
            aws_default_credentials: r.flag("STREAMING_HUB_AWS_DEFAULT_CREDENTIALS", false),
            aws_endpoint_url: r.parse("STREAMING_HUB_AWS_ENDPOINT_URL", None, |raw| match url::Url::parse(raw) {
                Ok(u) if u.scheme() == "http" || u.scheme() == "https" => Ok(Some(raw.to_owned())),
                _ => Err(format!("must be an http(s) URL (got {})", quoted(raw))),
            }),
            oidc_issuer: r.parse("STREAMING_HUB_OIDC_ISSUER", None, oidc_issuer),
            oidc_key_overlap: r.duration("STREAMING_HUB_OIDC_KEY_OVERLAP", "24h"),
            sso_issuers: r.parse("STREAMING_HUB_SSO_ISSUERS", Vec::new(), |raw| sso_issuers(raw, env.is_local())),
            sso_audience: r.text("STREAMING_HUB_SSO_AUDIENCE").map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()),
            sso_roles_claim: r.parse("STREAMING_HUB_SSO_ROLES_CLAIM", "roles".to_owned(), roles_claim),
            sso_keys_refresh: r.parse("STREAMING_HUB_SSO_KEYS_REFRESH", Duration::from_secs(300), |raw| {
                match humantime::parse_duration(raw) {
                    Ok(d) if d >= Duration::from_secs(1) && d <= Duration::from_secs(86_400) => Ok(d),
                    _ => Err(format!("must be a duration from 1s to 24h, such as 5m (got {})", quoted(raw))),
                }
            }),
            sso_console_client_id: r
                .text("STREAMING_HUB_SSO_CONSOLE_CLIENT_ID")
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty()),
            sso_console_client_secret: r.text("STREAMING_HUB_SSO_CONSOLE_CLIENT_SECRET").map(Secret),
            sso_session_ttl: r.parse("STREAMING_HUB_SSO_SESSION_TTL", Duration::from_secs(8 * 3600), |raw| {
                match humantime::parse_duration(raw) {
                    Ok(d) if d >= Duration::from_secs(300) && d <= Duration::from_secs(7 * 86_400) => Ok(d),
                    _ => Err(format!("must be a duration from 5m to 7d, such as 8h (got {})", quoted(raw))),
                }
            }),
            ledger_checkpoint_interval: r.parse(
                "STREAMING_HUB_LEDGER_CHECKPOINT_INTERVAL",
                Duration::from_secs(2),
                |raw| match humantime::parse_duration(raw) {
                    Ok(d) if d >= Duration::from_millis(100) && d <= Duration::from_secs(60) => Ok(d),
                    _ => Err(format!("must be a duration from 100ms to 60s, such as 2s (got {})", quoted(raw))),
                },
            ),
            ledger_retention: r.duration("STREAMING_HUB_LEDGER_RETENTION", "1826d"),
            transform_cpu: r.parse("STREAMING_HUB_TRANSFORM_CPU", Duration::from_millis(5), |raw| {
                match humantime::parse_duration(raw) {
                    Ok(d) if d >= Duration::from_micros(100) && d <= Duration::from_secs(1) => Ok(d),
                    _ => Err(format!("must be a duration from 100us to 1s, such as 5ms (got {})", quoted(raw))),
                }
            }),
            transform_memory: r.parse("STREAMING_HUB_TRANSFORM_MEMORY", 16 << 20, memory_size),
            transform_threads: r.number(
                "STREAMING_HUB_TRANSFORM_THREADS",
                std::thread::available_parallelism().map_or(2, |n| n.get().min(64) as u32),
                1,
                64,
            ),
            transform_worker: r.text("STREAMING_HUB_TRANSFORM_WORKER").map(std::path::PathBuf::from),
            erasure: ErasureSettings {
                page: r.parse("STREAMING_HUB_ERASURE_PAGE", 2_000, |raw| match raw.parse::<u32>() {
                    Ok(n) if (1..=10_000).contains(&n) => Ok(n),
                    _ => Err(format!("must be a whole number from 1 to 10000 (got {})", quoted(raw))),
                }),
                max_unconfirmed: r.parse("STREAMING_HUB_ERASURE_MAX_UNCONFIRMED", 1_000, |raw| {
                    match raw.parse::<u64>() {
                        Ok(n) if n <= 1_000_000_000 => Ok(n),
                        _ => Err(format!("must be a whole number from 0 to 1000000000 (got {})", quoted(raw))),
                    }
                }),
            },
            kek_ref: r.text("STREAMING_HUB_KEK_REF"),
            dev_kek: r.text("STREAMING_HUB_DEV_KEK").map(Secret),
            shutdown_timeout: r.duration("STREAMING_HUB_SHUTDOWN_TIMEOUT", "30s"),
            drain_delay: r.duration("STREAMING_HUB_DRAIN_DELAY", if env.is_local() { "0s" } else { "5s" }),
            metrics_interval: r.duration("STREAMING_HUB_METRICS_INTERVAL", "15s"),
            manifest_sources: r.parse("STREAMING_HUB_MANIFEST_SOURCES", Vec::new(), manifest_sources),
            manifest_refresh_interval: r.duration("STREAMING_HUB_MANIFEST_REFRESH_INTERVAL", "300s"),
            public_url: r.parse("STREAMING_HUB_PUBLIC_URL", None, |raw| match url::Url::parse(raw) {
                Ok(u)
                    if (u.scheme() == "http" || u.scheme() == "https") && u.host().is_some() && u.query().is_none() =>
                {
                    Ok(Some(raw.trim_end_matches('/').to_owned()))
                }
                _ => Err(format!("must be an http(s) URL without a query (got {})", quoted(raw))),
            }),
            portal_frame_ancestors: r.parse(
                "STREAMING_HUB_PORTAL_FRAME_ANCESTORS",
                "'none'".to_owned(),
                frame_ancestors,
            ),
            validate_payloads: r.parse(
                "STREAMING_HUB_VALIDATE_PAYLOADS",
                PayloadValidation::Off,
                PayloadValidation::parse,
            ),
            log: r.parse("STREAMING_HUB_LOG", None, |raw| {
                tracing_subscriber::EnvFilter::try_new(raw)
                    .map(|_| Some(raw.to_owned()))
                    .map_err(|e| format!("must be a log filter such as info or info,hub_store=debug ({e})"))
            }),
            ignored: vars
                .keys()
                .filter(|k| {
                    k.starts_with("STREAMING_HUB_")
                        && !KNOWN.contains(&k.as_str())
                        && !ALIASES.iter().any(|(alias, _)| alias == k)
                        // The variable STREAMING_HUB_KEK_REF names holds the key: read, not ignored.
                        && vars.get("STREAMING_HUB_KEK_REF").is_none_or(|kek| kek.trim() != k.as_str())
                })
                .map(|k| if k.len() > 128 { quoted(k) } else { k.clone() })
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect(),
            env,
        };
        if config.env.is_production() {
            production_refusals(&mut r, &config);
        }
        if config.manifest_refresh_interval < Duration::from_secs(1) {
            r.problem("STREAMING_HUB_MANIFEST_REFRESH_INTERVAL", "must be at least 1s");
        }
        if config.dispatch_lease < Duration::from_secs(1) {
            r.problem("STREAMING_HUB_DISPATCH_LEASE", "must be at least 1s (and longer than any sink timeout)");
        }
        if config.dispatch_stall_timeout <= config.dispatch_lease {
            r.problem(
                "STREAMING_HUB_DISPATCH_STALL_TIMEOUT",
                "must be longer than STREAMING_HUB_DISPATCH_LEASE (every attempt ends within 80 % of the lease)",
            );
        }
        if !config.sso_issuers.is_empty() && config.sso_audience.is_none() {
            r.problem(
                "STREAMING_HUB_SSO_AUDIENCE",
                "is required with STREAMING_HUB_SSO_ISSUERS (the aud tokens must carry)",
            );
        }
        if config.sso_console_client_id.is_some() {
            if config.sso_issuers.is_empty() {
                r.problem(
                    "STREAMING_HUB_SSO_CONSOLE_CLIENT_ID",
                    "needs STREAMING_HUB_SSO_ISSUERS (the console signs people in at the first issuer)",
                );
            }
            if !config.env.is_local() && !config.public_url.as_deref().is_some_and(|u| u.starts_with("https://")) {
                r.problem(
                    "STREAMING_HUB_PUBLIC_URL",
                    "must be the hub's https address when STREAMING_HUB_SSO_CONSOLE_CLIENT_ID is set outside local \
                     (the provider sends people back to <it>/console/sso/callback)",
                );
            }
        } else if config.sso_console_client_secret.is_some() {
            r.problem(
                "STREAMING_HUB_SSO_CONSOLE_CLIENT_SECRET",
                "is only read with STREAMING_HUB_SSO_CONSOLE_CLIENT_ID",
            );
        }
        if config.ledger_retention < config.job_retention.max(config.event_retention) {
            r.problem(
                "STREAMING_HUB_LEDGER_RETENTION",
                "must not be shorter than STREAMING_HUB_JOB_RETENTION or STREAMING_HUB_EVENT_RETENTION (the ledger \
                 outlives the deliveries it records)",
            );
        }
        if r.problems.is_empty() { Ok(config) } else { Err(ConfigError(r.problems)) }
    }

    /// A summary for the start-up log line: no secrets.
    pub fn summary(&self) -> BTreeMap<&'static str, String> {
        let mut s = BTreeMap::new();
        s.insert("env", self.env.as_str().to_owned());
        s.insert("role", format!("{:?}", self.role).to_lowercase());
        s.insert("http", self.http_listen_addr.to_string());
        s.insert(
            "store",
            match &self.database {
                Database::Sqlite { path } => format!("sqlite:{}", path.display()),
                Database::Postgres { .. } => "postgres".to_owned(),
            },
        );
        s.insert("kafka", if self.kafka.is_some() { "configured" } else { "off" }.to_owned());
        s
    }
}

/// What `STREAMING_HUB_ENV=production` refuses to start with (SPEC §6.1), each by its variable.
fn production_refusals(r: &mut Reader<'_>, c: &Config) {
    if let Some(k) = &c.kafka {
        if !k.tls {
            r.problem("STREAMING_HUB_KAFKA_TLS_ENABLED", "must be true in production: plaintext Kafka is refused");
        }
    }
    if let Database::Postgres { tls, .. } = &c.database {
        if !tls {
            r.problem(
                "STREAMING_HUB_POSTGRES_DSN",
                "must use TLS in production (sslmode=require, verify-ca or verify-full)",
            );
        }
    }
    if c.allow_private_sinks {
        r.problem("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "must be false in production: private destinations are refused");
    }
    if c.kek_ref.is_none() {
        r.problem("STREAMING_HUB_KEK_REF", "is required in production: secrets are never stored without a key");
    }
}

fn kafka_config(r: &mut Reader<'_>, env: &Environment) -> Option<KafkaConfig> {
    let brokers = r.text("STREAMING_HUB_KAFKA_BROKERS")?;
    let username = r.text("STREAMING_HUB_KAFKA_SCRAM_USERNAME");
    let password = r.text("STREAMING_HUB_KAFKA_SCRAM_PASSWORD");
    let mechanism = r.parse("STREAMING_HUB_KAFKA_SCRAM_MECHANISM", "SCRAM-SHA-512".to_owned(), |raw| {
        match raw.to_ascii_uppercase().as_str() {
            m @ ("SCRAM-SHA-512" | "SCRAM-SHA-256") => Ok(m.to_owned()),
            _ => Err(format!("must be SCRAM-SHA-512 or SCRAM-SHA-256 (got {})", quoted(raw))),
        }
    });
    let scram = match (username, password) {
        (Some(username), Some(password)) => Some(Scram { username, password: Secret(password), mechanism }),
        (None, None) => None,
        (Some(_), None) => {
            r.problem("STREAMING_HUB_KAFKA_SCRAM_PASSWORD", "must be set with STREAMING_HUB_KAFKA_SCRAM_USERNAME");
            None
        }
        (None, Some(_)) => {
            r.problem("STREAMING_HUB_KAFKA_SCRAM_USERNAME", "must be set with STREAMING_HUB_KAFKA_SCRAM_PASSWORD");
            None
        }
    };
    // A file, or (as the original deployment's chart passes it) the PEM itself, base64-encoded.
    let ca_cert = r.parse("STREAMING_HUB_KAFKA_CA_CERT", None, |raw| {
        use base64::Engine;
        if std::path::Path::new(raw).is_file() {
            return Ok(Some(CaCert::File(PathBuf::from(raw))));
        }
        let pem = base64::engine::general_purpose::STANDARD
            .decode(raw.split_whitespace().collect::<String>())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .filter(|pem| pem.contains("-----BEGIN CERTIFICATE-----"));
        match pem {
            Some(pem) => Ok(Some(CaCert::Pem(pem))),
            None => Err("must be a readable PEM file or a base64-encoded PEM certificate".to_owned()),
        }
    });
    let tls = r.flag("STREAMING_HUB_KAFKA_TLS_ENABLED", false);
    if ca_cert.is_some() && !tls {
        r.problem("STREAMING_HUB_KAFKA_CA_CERT", "is set but STREAMING_HUB_KAFKA_TLS_ENABLED is not true");
    }
    let group_name = |r: &mut Reader<'_>, name: &str, default: String| {
        r.parse(name, default.clone(), |raw| {
            if raw.len() <= 249 && raw.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
                Ok(raw.to_owned())
            } else {
                Err("may contain letters, digits, '.', '_' and '-' (at most 249)".to_owned())
            }
        })
    };
    Some(KafkaConfig {
        brokers,
        group_id: group_name(r, "STREAMING_HUB_KAFKA_GROUP_ID", format!("streaming-hub.{}", env.as_str())),
        dlq_group_id: group_name(r, "STREAMING_HUB_KAFKA_DLQ_GROUP_ID", format!("streaming-hub-dlq.{}", env.as_str())),
        client_id: group_name(r, "STREAMING_HUB_KAFKA_CLIENT_ID", "streaming-hub".to_owned()),
        scram,
        tls,
        ca_cert,
        session_timeout: r.duration("STREAMING_HUB_KAFKA_SESSION_TIMEOUT", "45s"),
        batch_size: r.number("STREAMING_HUB_KAFKA_BATCH_SIZE", 500, 1, 100_000) as usize,
        batch_wait: r.duration("STREAMING_HUB_KAFKA_BATCH_WAIT", "20ms"),
        topic_refresh: r.duration("STREAMING_HUB_KAFKA_TOPIC_REFRESH", "30s"),
        dlq_enabled: r.flag("STREAMING_HUB_DLQ_ENABLED", true),
        stats_interval: r.duration("STREAMING_HUB_METRICS_INTERVAL", "15s"),
        outage_log_interval: r.duration("STREAMING_HUB_KAFKA_OUTAGE_LOG_INTERVAL", "60s"),
    })
}

/// `0s,5s,5m,30m,2h,5h,10h,10h`: the delay before each attempt.
pub fn default_retry_curve() -> Vec<Duration> {
    [0, 5, 300, 1800, 7200, 18_000, 36_000, 36_000].into_iter().map(Duration::from_secs).collect()
}

#[cfg(test)]
mod tests;

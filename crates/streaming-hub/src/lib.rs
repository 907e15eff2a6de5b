//! The Streaming Hub service: configuration, the HTTP API, ingest and (as the product grows) the
//! Kafka consumer and the delivery dispatcher. This is the only crate that owns sockets,
//! processes and configuration; the domain lives in `hub-core` and SQL in `hub-store`.
#![forbid(unsafe_code)]

// The rooms of the service: reached from outside only through what is re-exported below and
// through `testing`.
pub(crate) mod api;
pub(crate) mod catalog;
pub(crate) mod clock;
pub mod config;
pub(crate) mod delivery;
pub(crate) mod demo;
pub(crate) mod erasure;
pub(crate) mod ingest;
pub(crate) mod keys;
pub(crate) mod ledger;
pub(crate) mod oidc;
pub(crate) mod operational;
pub(crate) mod retention;
pub(crate) mod secrets;
pub(crate) mod server;
pub(crate) mod sso;
pub(crate) mod supervisor;
pub mod telemetry;
pub mod testing;
pub mod trace;

pub use api::openapi_json;
pub use demo::run as run_demo;
pub use keys::{KeyRequest, create_from_cli as create_api_key};

/// What `streaming-hub --version` prints: the version, the git revision and the build date (the
/// image's OCI labels carry the same).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (revision ",
    env!("HUB_BUILD_REVISION"),
    ", built ",
    env!("HUB_BUILD_DATE"),
    ")"
);

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use hub_core::IngestPolicy;
use hub_store::{Store, StoreConfig};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, Database, Secret};

/// Prefix of an admin token generated in `local` mode.
pub const GENERATED_ADMIN_PREFIX: &str = "shadm_";

/// Opens the configured store. In `local` it is migrated at once; elsewhere a database whose
/// schema is behind this build is refused (migrations are an explicit `streaming-hub migrate`).
pub async fn open_store(config: &Config, migrate: bool) -> anyhow::Result<Arc<dyn Store>> {
    let store_config = match &config.database {
        Database::Sqlite { path } => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("STREAMING_HUB_SQLITE_PATH: cannot create {}", dir.display()))?;
            }
            StoreConfig::Sqlite { path: path.clone() }
        }
        Database::Postgres { dsn, schema, pool, .. } => {
            StoreConfig::Postgres { dsn: dsn.expose().to_owned(), schema: schema.clone(), pool: *pool }
        }
    };
    let variable = match &config.database {
        Database::Sqlite { .. } => "STREAMING_HUB_SQLITE_PATH",
        Database::Postgres { .. } => "STREAMING_HUB_POSTGRES_DSN",
    };
    // A database that is not there yet (starting beside the hub) is waited for, and said so; one
    // that answers and refuses stops the hub with its one reason.
    let mut wait = std::time::Duration::from_secs(1);
    let store = loop {
        match hub_store::connect(&store_config).await {
            Ok(store) => break store,
            Err(hub_store::StoreError::Unreachable(why)) => {
                tracing::warn!(variable, reason = %why, retry_in = ?wait, "the database is unreachable; waiting for it");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(std::time::Duration::from_secs(10));
            }
            Err(e) => anyhow::bail!("{variable}: cannot open the database: {e}"),
        }
    };
    if migrate {
        let pending = store.pending_migrations().await?;
        store.migrate().await.context("cannot migrate the database")?;
        if !pending.is_empty() {
            tracing::info!(applied = ?pending, "database migrations applied");
        }
        return Ok(store);
    }
    if config.env.is_local() {
        // Local mode migrates on its own, so only a database that is empty or already this
        // hub's: never another application's pointed at by mistake.
        let foreign = store.foreign_tables().await?;
        if !foreign.is_empty() {
            let shown: Vec<&str> = foreign.iter().take(5).map(String::as_str).collect();
            anyhow::bail!(
                "{variable}: the database holds tables that are not this hub's ({}{}); local mode migrates only an \
                 empty database or this hub's own. Point it at an empty database{}, or migrate deliberately with \
                 `streaming-hub migrate`",
                shown.join(", "),
                if foreign.len() > 5 { ", …" } else { "" },
                if matches!(config.database, Database::Postgres { .. }) {
                    " or schema (STREAMING_HUB_POSTGRES_SCHEMA)"
                } else {
                    ""
                },
            );
        }
        store.migrate().await.context("cannot migrate the database")?;
    } else {
        let pending = store.pending_migrations().await?;
        anyhow::ensure!(
            pending.is_empty(),
            "the database schema is behind this build (missing migrations {pending:?}): run `streaming-hub migrate`"
        );
    }
    Ok(store)
}

/// A running hub.
#[derive(Debug)]
pub struct Hub {
    pub addr: SocketAddr,
    /// `None` outside `local` when the operators use admin keys only.
    pub admin_token: Option<Secret>,
    /// True when the admin token was generated at start (local mode without one configured).
    pub admin_token_generated: bool,
    pub store: Arc<dyn Store>,
    http: JoinHandle<Option<std::io::Result<()>>>,
    tasks: Vec<JoinHandle<Option<()>>>,
    supervisor: supervisor::Supervisor,
}

impl Hub {
    /// Waits until the hub has stopped (after its shutdown token was cancelled, or a background
    /// task failed), then closes the store; an error when a task failed.
    pub async fn wait(self) -> anyhow::Result<()> {
        let http = self.http.await.context("HTTP server task failed")?;
        for task in self.tasks {
            task.await.context("background task failed")?;
        }
        self.store.close().await;
        if let Some(name) = self.supervisor.failed() {
            anyhow::bail!("background task {name} stopped while the hub was running");
        }
        http.unwrap_or(Ok(())).context("HTTP server failed")
    }
}

/// Starts the hub on the system clock. Runs until `shutdown` is cancelled.
pub async fn start(config: Config, shutdown: CancellationToken) -> anyhow::Result<Hub> {
    start_with_clock(config, shutdown, Arc::new(clock::SystemClock)).await
}

/// Starts the hub: store, HTTP API and, by role, the dispatcher.
pub async fn start_with_clock(
    config: Config,
    shutdown: CancellationToken,
    clock: Arc<dyn clock::Clock>,
) -> anyhow::Result<Hub> {
    let kek = secrets::load_kek(&config)?;
    match &kek {
        Some(kek) => tracing::info!(kek = %kek.id_hex(), "key-encryption key loaded"),
        None => tracing::warn!("no key-encryption key configured: webhook and credentialed subscriptions are refused"),
    }
    let store = open_store(&config, false).await?;
    hub_store::set_filter_budget(hub_core::routing::meter::steps_for(config.filter_budget));
    let listener = tokio::net::TcpListener::bind(config.http_listen_addr)
        .await
        .with_context(|| format!("STREAMING_HUB_HTTP_LISTEN_ADDR: cannot listen on {}", config.http_listen_addr))?;
    let addr = listener.local_addr()?;

    let (admin_token, admin_token_generated) = match &config.admin_token {
        Some(token) => (Some(token.clone()), false),
        None if config.env.is_local() => (Some(Secret::new(keys::generate(GENERATED_ADMIN_PREFIX))), true),
        // People with the platform-admin role administer the hub: the admin token is off, kept
        // for break-glass (set it and restart).
        None if !config.sso_issuers.is_empty() => {
            tracing::info!("no admin token: the admin routes take admin keys and people with platform roles");
            (None, false)
        }
        // Outside `local` the operators may use admin keys instead; without either, nobody could
        // ever administer this hub.
        None => match store.count_admin_keys().await? {
            0 => anyhow::bail!(
                "STREAMING_HUB_ADMIN_TOKEN: required outside STREAMING_HUB_ENV=local unless an admin key exists \
                 (create one with `streaming-hub api-key create --admin --name <who>`) or people sign in \
                 (STREAMING_HUB_SSO_ISSUERS)"
            ),
            n => {
                tracing::info!(admin_keys = n, "no admin token: the admin routes take admin keys only");
                (None, false)
            }
        },
    };
    let draining = Arc::new(AtomicBool::new(false));
    // SIGTERM (`shutdown`) first turns readiness off; work stops after the drain delay.
    let stop = CancellationToken::new();
    let supervisor = supervisor::Supervisor::new(stop.clone(), shutdown.clone());
    {
        let (shutdown, stop, draining, delay) =
            (shutdown.clone(), stop.clone(), Arc::clone(&draining), config.drain_delay);
        tokio::spawn(async move {
            shutdown.cancelled().await;
            draining.store(true, Ordering::SeqCst);
            tracing::info!(delay_ms = delay.as_millis() as u64, "draining: /readyz answers 503");
            tokio::time::sleep(delay).await;
            stop.cancel();
        });
    }
    let sealer = Arc::new(secrets::Sealer::new(kek));
    let issuer = match &config.oidc_issuer {
        Some(url) => {
            let issuer = oidc::Issuer::start(
                url.clone(),
                config.oidc_key_overlap,
                Arc::clone(&store),
                Arc::clone(&sealer),
                Arc::clone(&clock),
            )
            .await
            .context("STREAMING_HUB_OIDC_ISSUER: the issuer's signing keys cannot be read or made")?;
            tracing::info!(issuer = %url, "OIDC issuer: AWS destinations may assume roles with this hub's tokens");
            Some(issuer)
        }
        None => None,
    };
    let ledger = ledger::Ledger::start(Arc::clone(&store), Arc::clone(&sealer), Arc::clone(&clock))
        .await
        .context("the ledger's signing keys cannot be read or made")?;
    let sinks: Arc<dyn hub_sinks::Sink> = Arc::new(
        hub_sinks::Sinks::new(
            config.allow_private_sinks,
            config.aws_default_credentials,
            config.aws_endpoint_url.clone(),
            issuer.clone().map(|i| i as Arc<dyn hub_sinks::TokenIssuer>),
        )
        .map_err(anyhow::Error::msg)?,
    );
    let wake = Arc::new(tokio::sync::Notify::new());
    // Tenant code runs in worker processes (started when first needed): at delivery, and where
    // the API checks or tries a transform.
    let transforms = transform_pool(&config)?;
    let (notices, notice_queue) = operational::Notices::channel();
    let breakers = delivery::BreakerBoard::default();
    let flights = delivery::FlightBoard::new(config.max_in_flight as usize, config.tenant_in_flight_share);
    // Every replica registers; the delivering ones share the destinations between them, each
    // paced by one replica (docs/SCALING.md).
    let membership = delivery::Membership::join(&store, config.role.delivers(), &clock)
        .await
        .context("cannot register this replica in the store")?;
    // This process's dispatcher, when it delivers: its own ingest leases jobs to it as it writes
    // them (the fast path).
    let mut local_dispatcher = None;
    let mut tasks_early: Vec<JoinHandle<Option<()>>> = Vec::new();
    let dispatcher = if config.role.delivers() {
        store.listen_for_jobs(Arc::clone(&wake)).await.context("cannot listen for job notifications")?;
        let dispatcher = Arc::new(
            delivery::Dispatcher::new(
                delivery::Parts {
                    store: Arc::clone(&store),
                    sealer: Arc::clone(&sealer),
                    sinks: Arc::clone(&sinks),
                    clock: Arc::clone(&clock),
                    wake: Arc::clone(&wake),
                    notices: notices.clone(),
                    breakers: breakers.clone(),
                    flights: flights.clone(),
                },
                delivery::settings(&config),
            )
            .with_transforms(transforms.clone())
            .with_membership(Arc::clone(&membership)),
        );
        local_dispatcher = Some(delivery::Handoff::new(Arc::clone(&dispatcher)));
        tasks_early.push(supervisor.spawn(
            "delivery statistics",
            delivery::stats::run(
                dispatcher.stats(),
                Arc::clone(&store),
                Arc::clone(&clock),
                config.metrics_interval,
                stop.clone(),
            ),
        ));
        Some(supervisor.spawn("dispatcher", dispatcher.run(stop.clone(), config.shutdown_timeout)))
    } else {
        None
    };
    let mut tasks: Vec<JoinHandle<Option<()>>> = dispatcher.into_iter().collect();
    tasks.append(&mut tasks_early);
    tasks.push(supervisor.spawn(
        "replica heartbeat",
        delivery::membership::run(
            Arc::clone(&membership),
            Arc::clone(&store),
            config.role.delivers().then(|| (flights.clone(), breakers.clone())),
            Arc::clone(&clock),
            config.poison_threshold,
            stop.clone(),
        ),
    ));
    tasks.push(supervisor.spawn(
        "operational events writer",
        operational::run(Arc::clone(&store), Arc::clone(&clock), notice_queue, Arc::clone(&wake), stop.clone()),
    ));
    let catalog = Arc::new(catalog::EventCatalog::new(Arc::clone(&store), config.validate_payloads));
    // The catalog as stored, before the first record is judged.
    if let Err(e) = catalog.reload().await {
        tracing::warn!(error = %e, "could not read the event catalog; starting without it");
    }
    tasks.push(supervisor.spawn(
        "manifest refresh",
        catalog::refresh::run(
            Arc::clone(&catalog),
            Arc::clone(&store),
            catalog::fetch::Fetcher::new(config.allow_private_sinks).map_err(anyhow::Error::msg)?,
            Arc::clone(&clock),
            catalog::refresh::Settings {
                sources: config.manifest_sources.clone(),
                interval: config.manifest_refresh_interval,
            },
            stop.clone(),
        ),
    ));
    tasks.push(supervisor.spawn(
        "event type learner",
        catalog::learn::run(Arc::clone(&catalog.learner), Arc::clone(&store), stop.clone()),
    ));
    let erasures = Arc::new(tokio::sync::Notify::new());
    tasks.push(supervisor.spawn(
        "erasure runner",
        erasure::run(
            Arc::clone(&store),
            Arc::clone(&sealer),
            Arc::clone(&clock),
            erasure::Settings { page: config.erasure.page, ..erasure::Settings::default() },
            Arc::clone(&erasures),
            stop.clone(),
        ),
    ));
    if let Some(issuer) = &issuer {
        tasks.push(supervisor.spawn("issuer keys refresh", oidc::refresh_loop(Arc::clone(issuer), stop.clone())));
    }
    tasks.push(
        supervisor
            .spawn("ledger sealer", ledger::run(Arc::clone(&ledger), config.ledger_checkpoint_interval, stop.clone())),
    );
    let replays = Arc::new(tokio::sync::Notify::new());
    if config.role.delivers() {
        tasks.push(supervisor.spawn(
            "replay runner",
            delivery::replay::run(
                Arc::clone(&store),
                Arc::clone(&clock),
                delivery::replay::ReplaySettings::default(),
                Arc::clone(&replays),
                Arc::clone(&wake),
                notices.clone(),
                stop.clone(),
            ),
        ));
    }
    let policy = Arc::new(IngestPolicy { only_tenant: config.only_tenant.clone(), cell: config.cell.clone() });
    if let (Some(kafka), true) = (&config.kafka, config.role.ingests()) {
        let batching = ingest::kafka::Batching { size: kafka.batch_size, wait: kafka.batch_wait };
        let consumer = ingest::kafka::subscribe(kafka, "ingest", &kafka.group_id, ingest::kafka::INGEST_PATTERN)
            .map_err(anyhow::Error::msg)?;
        let writer = ingest::KafkaEvents {
            store: Arc::clone(&store),
            policy: Arc::clone(&policy),
            catalog: Arc::clone(&catalog),
            clock: Arc::clone(&clock),
            wake: Arc::clone(&wake),
            fast: local_dispatcher.clone(),
        };
        tasks.push(
            supervisor
                .spawn("kafka ingest consumer", ingest::kafka::run("ingest", consumer, writer, batching, stop.clone())),
        );
        if kafka.dlq_enabled {
            let consumer = ingest::kafka::subscribe(kafka, "dlq", &kafka.dlq_group_id, ingest::kafka::DLQ_PATTERN)
                .map_err(anyhow::Error::msg)?;
            let writer = ingest::dlq::DlqRecords {
                store: Arc::clone(&store),
                clock: Arc::clone(&clock),
                policy: Arc::clone(&policy),
            };
            tasks.push(
                supervisor
                    .spawn("kafka dlq consumer", ingest::kafka::run("dlq", consumer, writer, batching, stop.clone())),
            );
        }
    }
    tasks.push(supervisor.spawn(
        "retention",
        retention::run(
            Arc::clone(&store),
            Arc::clone(&clock),
            retention::policies(&config),
            config.prune_interval,
            stop.clone(),
        ),
    ));
    tasks.push(supervisor.spawn(
        "dlq retention",
        retention::run(
            Arc::clone(&store),
            Arc::clone(&clock),
            vec![(hub_store::PruneKind::Dlq, config.dlq_retention)],
            config.dlq_prune_interval,
            stop.clone(),
        ),
    ));
    tasks.push(
        supervisor
            .spawn("job gauges", telemetry::job_gauges(Arc::clone(&store), config.metrics_interval, stop.clone())),
    );
    let state = api::AppState {
        store: Arc::clone(&store),
        admin_token: admin_token.clone(),
        policy: Arc::clone(&policy),
        key_cache: Arc::default(),
        simulations: Arc::default(),
        sso: match (config.sso_issuers.is_empty(), &config.sso_audience) {
            (false, Some(audience)) => Some(Arc::new(
                sso::Sso::new(&sso::Settings {
                    issuers: config.sso_issuers.clone(),
                    audience: audience.clone(),
                    roles_claim: config.sso_roles_claim.clone(),
                    refresh: config.sso_keys_refresh,
                    allow_private: config.allow_private_sinks,
                    console: config.sso_console_client_id.clone().map(|client_id| sso::console::Client {
                        client_id,
                        client_secret: config.sso_console_client_secret.clone(),
                        session_ttl: config.sso_session_ttl,
                    }),
                })
                .map_err(anyhow::Error::msg)?,
            )),
            _ => None,
        },
        // SQLite has one writer: one group at a time. PostgreSQL writes different tenants at once.
        ingest: ingest::GroupWriter::start(
            Arc::clone(&store),
            Arc::clone(&wake),
            match config.database {
                Database::Sqlite { .. } => 1,
                Database::Postgres { pool, .. } => (pool.max_connections as usize / 4).clamp(1, 8),
            },
            local_dispatcher.clone(),
            Arc::clone(&catalog.learner),
        ),
        sealer,
        allow_private_sinks: config.allow_private_sinks,
        pull_limiter: Arc::new(api::limiter::TenantLimiter::new(config.pull_rate, config.pull_burst)),
        ingest_limiter: Arc::new(api::limiter::TenantLimiter::new(
            config.quotas.ingest_rate,
            config.quotas.ingest_burst,
        )),
        quotas: config.quotas,
        sinks,
        clock,
        wakers: api::Wakers { dispatcher: wake, replays, erasures },
        replay_rate: config.replay_rate,
        breakers,
        flights,
        membership,
        notices,
        kafka: match (&config.kafka, config.role.ingests()) {
            (Some(k), true) => Some(Arc::new(ingest::kafka::KafkaProbe::new(k).map_err(anyhow::Error::msg)?)),
            _ => None,
        },
        draining: Arc::clone(&draining),
        supervisor: supervisor.clone(),
        request_timeout: config.http_limits.request_timeout,
        catalog,
        public_url: config.public_url.clone(),
        frame_ancestors: config.portal_frame_ancestors.clone(),
        test_waiting: Arc::default(),
        issuer,
        ledger,
        erasure: config.erasure,
        stall_timeout: config.dispatch_stall_timeout,
        transforms,
    };
    telemetry::prometheus();
    let router = api::router(state);
    let stop_http = stop.clone();
    let http = supervisor.spawn("HTTP server", server::serve(listener, router, config.http_limits, stop_http));
    // What the configuration says that the operator should act on comes before the line that
    // says the hub started.
    for variable in &config.ignored {
        tracing::warn!(variable = %variable, "configuration variable not used by this hub; ignored");
    }
    for (variable, what) in &config.deprecated {
        tracing::warn!(variable = %variable, "configuration variable {what}");
    }
    tracing::info!(addr = %addr, config = ?config.summary(), "streaming hub started");
    Ok(Hub { addr, admin_token, admin_token_generated, store, http, tasks, supervisor })
}

/// The pool of transform workers the configuration asks for: its worker program (this
/// executable unless `STREAMING_HUB_TRANSFORM_WORKER` names another), count and limits.
fn transform_pool(config: &Config) -> anyhow::Result<hub_transform::Pool> {
    let command = match &config.transform_worker {
        Some(program) => hub_transform::WorkerCommand::of(program.clone()),
        None => hub_transform::WorkerCommand::this_executable().context("cannot find this hub's executable")?,
    };
    hub_transform::Pool::new(
        command,
        config.transform_threads as usize,
        hub_transform::Limits { cpu: config.transform_cpu, memory: config.transform_memory },
        hub_transform::CACHE_BYTES,
    )
    .context("cannot start the transform threads")
}

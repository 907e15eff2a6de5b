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

/// What every room of the hub is started with.
#[derive(Debug, Clone)]
pub(crate) struct Common {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn clock::Clock>,
    pub sealer: Arc<secrets::Sealer>,
    /// Operational events.
    pub notices: operational::Notices,
    /// Wakes the dispatcher: new jobs, a verified destination, a redrive.
    pub wake: Arc<tokio::sync::Notify>,
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

    let (admin_token, admin_token_generated) = admin_token(&config, store.as_ref()).await?;
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
    let (notices, notice_queue) = operational::Notices::channel();
    let common = Common {
        store: Arc::clone(&store),
        clock,
        sealer: Arc::new(secrets::Sealer::new(kek)),
        notices,
        wake: Arc::new(tokio::sync::Notify::new()),
    };
    let mut launch = supervisor::Launch::new(supervisor.clone(), stop.clone());
    let issuer = oidc::start(&config, &common, &mut launch).await?;
    let ledger = ledger::start(&config, &common, &mut launch).await?;
    let delivery = delivery::start(&config, &common, issuer.clone(), &mut launch).await?;
    launch.spawn(
        "operational events writer",
        operational::run(
            Arc::clone(&store),
            Arc::clone(&common.clock),
            notice_queue,
            Arc::clone(&common.wake),
            stop.clone(),
        ),
    );
    let catalog = catalog::start(&config, &common, &mut launch).await?;
    let erasures = erasure::start(&config, &common, &mut launch);
    let intake = ingest::start(&config, &common, &catalog, delivery.handoff.clone(), &mut launch)?;
    retention::start(&config, &common, &mut launch);
    launch.spawn("job gauges", telemetry::job_gauges(Arc::clone(&store), config.metrics_interval, stop.clone()));
    let state = api::AppState {
        store: Arc::clone(&store),
        clock: Arc::clone(&common.clock),
        sealer: Arc::clone(&common.sealer),
        notices: common.notices.clone(),
        access: api::Access {
            admin_token: admin_token.clone(),
            key_cache: Arc::default(),
            sso: sso::from_config(&config)?,
            issuer,
        },
        intake,
        catalog,
        wakers: api::Wakers { dispatcher: Arc::clone(&common.wake), replays: Arc::clone(&delivery.replays), erasures },
        delivery,
        ledger,
        limiters: api::Limiters {
            pull: Arc::new(api::limiter::TenantLimiter::new(config.pull_rate, config.pull_burst)),
            ingest: Arc::new(api::limiter::TenantLimiter::new(config.quotas.ingest_rate, config.quotas.ingest_burst)),
        },
        settings: api::Settings::new(&config),
        health: api::Health { draining: Arc::clone(&draining), supervisor: supervisor.clone() },
        simulations: Arc::default(),
        test_waiting: Arc::default(),
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
    Ok(Hub { addr, admin_token, admin_token_generated, store, http, tasks: launch.into_tasks(), supervisor })
}

/// The admin token the hub takes, and whether it was made at start (`local` without one
/// configured). Outside `local` the token may be left out when people sign in or an admin key
/// exists; otherwise nobody could ever administer the hub, which is refused.
async fn admin_token(config: &Config, store: &dyn Store) -> anyhow::Result<(Option<Secret>, bool)> {
    Ok(match &config.admin_token {
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
    })
}

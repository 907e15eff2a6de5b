//! The delivery room started: the sinks and transform workers of this process, the boards the
//! API lists from, this replica's membership and, when it delivers, the dispatcher (with its
//! statistics), the heartbeat that shares destinations and the replay runner.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::Notify;

use super::{BreakerBoard, Dispatcher, FlightBoard, Handoff, Membership, Parts, membership, replay, settings, stats};
use crate::Common;
use crate::config::Config;
use crate::supervisor::Launch;

/// What the delivery room hands the rest of the hub.
#[derive(Debug, Clone)]
pub struct Handle {
    /// Every sink of the process: the API verifies destinations and tries deliveries with them.
    pub sinks: Arc<dyn hub_sinks::Sink>,
    /// The transform workers: where a transform is checked, tried and run at delivery.
    pub transforms: hub_transform::Pool,
    /// Breakers of this process's dispatcher, for listings.
    pub breakers: BreakerBoard,
    /// What this replica's dispatcher has in flight (empty where it does not deliver).
    pub flights: FlightBoard,
    /// This replica among the others: who paces which destination.
    pub membership: Arc<Membership>,
    /// This process's dispatcher, when it delivers: its own ingest leases jobs to it as it
    /// writes them (the fast path).
    pub handoff: Option<Handoff>,
    /// Wakes the replay runner: a replay started.
    pub replays: Arc<Notify>,
    /// Delivery with no progress this long makes the replica unready.
    pub stall_timeout: Duration,
}

/// Starts delivery as the configuration's role asks; `issuer` signs the tokens AWS destinations
/// assume roles with.
pub(crate) async fn start(
    config: &Config,
    common: &Common,
    issuer: Option<Arc<crate::oidc::Issuer>>,
    launch: &mut Launch,
) -> anyhow::Result<Handle> {
    let sinks: Arc<dyn hub_sinks::Sink> = Arc::new(
        hub_sinks::Sinks::new(
            config.allow_private_sinks,
            config.aws_default_credentials,
            config.aws_endpoint_url.clone(),
            issuer.map(|i| i as Arc<dyn hub_sinks::TokenIssuer>),
        )
        .map_err(anyhow::Error::msg)?,
    );
    // Tenant code runs in worker processes (started when first needed): at delivery, and where
    // the API checks or tries a transform.
    let transforms = transform_pool(config)?;
    let breakers = BreakerBoard::default();
    let flights = FlightBoard::new(config.max_in_flight as usize, config.tenant_in_flight_share);
    // Every replica registers; the delivering ones share the destinations between them, each
    // paced by one replica (docs/SCALING.md).
    let membership = Membership::join(&common.store, config.role.delivers(), &common.clock)
        .await
        .context("cannot register this replica in the store")?;
    let replays = Arc::new(Notify::new());
    let mut handoff = None;
    if config.role.delivers() {
        let store = &common.store;
        store.listen_for_jobs(Arc::clone(&common.wake)).await.context("cannot listen for job notifications")?;
        let dispatcher = Arc::new(
            Dispatcher::new(
                Parts {
                    store: Arc::clone(store),
                    sealer: Arc::clone(&common.sealer),
                    sinks: Arc::clone(&sinks),
                    clock: Arc::clone(&common.clock),
                    wake: Arc::clone(&common.wake),
                    notices: common.notices.clone(),
                    breakers: breakers.clone(),
                    flights: flights.clone(),
                },
                settings(config),
            )
            .with_transforms(transforms.clone())
            .with_membership(Arc::clone(&membership)),
        );
        handoff = Some(Handoff::new(Arc::clone(&dispatcher)));
        let figures = dispatcher.stats();
        launch.spawn("dispatcher", dispatcher.run(launch.stop.clone(), config.shutdown_timeout));
        launch.spawn(
            "delivery statistics",
            stats::run(
                figures,
                Arc::clone(store),
                Arc::clone(&common.clock),
                config.metrics_interval,
                launch.stop.clone(),
            ),
        );
    }
    launch.spawn(
        "replica heartbeat",
        membership::run(
            Arc::clone(&membership),
            Arc::clone(&common.store),
            config.role.delivers().then(|| (flights.clone(), breakers.clone())),
            Arc::clone(&common.clock),
            config.poison_threshold,
            launch.stop.clone(),
        ),
    );
    if config.role.delivers() {
        launch.spawn(
            "replay runner",
            replay::run(
                Arc::clone(&common.store),
                Arc::clone(&common.clock),
                replay::ReplaySettings::default(),
                Arc::clone(&replays),
                Arc::clone(&common.wake),
                common.notices.clone(),
                launch.stop.clone(),
            ),
        );
    }
    let stall_timeout = config.dispatch_stall_timeout;
    Ok(Handle { sinks, transforms, breakers, flights, membership, handoff, replays, stall_timeout })
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

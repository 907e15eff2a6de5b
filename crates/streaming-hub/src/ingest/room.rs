//! The ingest room started: the policy records are judged by, HTTP ingest's group commit, and,
//! when this replica ingests from Kafka, its consumers (events, and dead letters when they are
//! kept).

use std::sync::Arc;

use hub_core::IngestPolicy;

use super::{GroupWriter, KafkaEvents, dlq, kafka};
use crate::Common;
use crate::catalog::EventCatalog;
use crate::config::{Config, Database};
use crate::delivery::Handoff;
use crate::supervisor::Launch;

/// What the ingest room hands the API.
#[derive(Debug, Clone)]
pub struct Handle {
    pub policy: Arc<IngestPolicy>,
    /// HTTP ingest's group commit.
    pub writer: GroupWriter,
    /// Readiness also requires Kafka when this replica consumes it.
    pub kafka: Option<Arc<kafka::KafkaProbe>>,
}

/// Starts ingest; `fast` is this process's dispatcher, which takes the jobs of what is written
/// here as they are written (the fast path).
pub(crate) fn start(
    config: &Config,
    common: &Common,
    catalog: &Arc<EventCatalog>,
    fast: Option<Handoff>,
    launch: &mut Launch,
) -> anyhow::Result<Handle> {
    let policy = Arc::new(IngestPolicy { only_tenant: config.only_tenant.clone(), cell: config.cell.clone() });
    let mut probe = None;
    if let (Some(settings), true) = (&config.kafka, config.role.ingests()) {
        let batching = kafka::Batching { size: settings.batch_size, wait: settings.batch_wait };
        let consumer = kafka::subscribe(settings, "ingest", &settings.group_id, kafka::INGEST_PATTERN)
            .map_err(anyhow::Error::msg)?;
        let writer = KafkaEvents {
            store: Arc::clone(&common.store),
            policy: Arc::clone(&policy),
            catalog: Arc::clone(catalog),
            clock: Arc::clone(&common.clock),
            wake: Arc::clone(&common.wake),
            fast: fast.clone(),
        };
        launch.spawn("kafka ingest consumer", kafka::run("ingest", consumer, writer, batching, launch.stop.clone()));
        if settings.dlq_enabled {
            let consumer = kafka::subscribe(settings, "dlq", &settings.dlq_group_id, kafka::DLQ_PATTERN)
                .map_err(anyhow::Error::msg)?;
            let writer = dlq::DlqRecords {
                store: Arc::clone(&common.store),
                clock: Arc::clone(&common.clock),
                policy: Arc::clone(&policy),
            };
            launch.spawn("kafka dlq consumer", kafka::run("dlq", consumer, writer, batching, launch.stop.clone()));
        }
        probe = Some(Arc::new(kafka::KafkaProbe::new(settings).map_err(anyhow::Error::msg)?));
    }
    // SQLite has one writer: one group at a time. PostgreSQL writes different tenants at once.
    let writers = match config.database {
        Database::Sqlite { .. } => 1,
        Database::Postgres { pool, .. } => (pool.max_connections as usize / 4).clamp(1, 8),
    };
    let writer = GroupWriter::start(
        Arc::clone(&common.store),
        Arc::clone(&common.wake),
        writers,
        fast,
        Arc::clone(&catalog.learner),
    );
    Ok(Handle { policy, writer, kafka: probe })
}

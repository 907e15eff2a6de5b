//! Fresh databases for the contract suite, and builders for test records.

use std::sync::Arc;

use chrono::Utc;
use hub_core::{IngestPolicy, Verdict, judge};
use hub_store::prelude::*;
use hub_store::{IngestRecord, Origin, PgStore, QuarantinedRecord, SqliteStore, Store};
use uuid::Uuid;

pub use hub_testkit::postgres_dsn;

/// A store on a database of its own, with a way to break it on purpose.
pub struct TestDb {
    pub store: Arc<dyn Store>,
    backend: Backend,
}

enum Backend {
    Sqlite(SqliteStore, std::path::PathBuf),
    Postgres(PgStore, String),
}

impl TestDb {
    pub async fn sqlite() -> Self {
        let dir = std::env::temp_dir().join("streaming-hub-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(format!("{}.db", Uuid::now_v7()));
        let store = SqliteStore::open(&path).await.expect("open sqlite");
        store.migrate().await.expect("migrate sqlite");
        Self { store: Arc::new(store.clone()), backend: Backend::Sqlite(store, path) }
    }

    pub async fn postgres() -> Self {
        let dsn = postgres_dsn();
        let schema = hub_testkit::fresh_schema().await;
        let store = PgStore::connect(&dsn, Some(&schema), 8).await.expect("connect to schema");
        store.migrate().await.expect("migrate postgres");
        Self { store: Arc::new(store.clone()), backend: Backend::Postgres(store, schema) }
    }

    /// A test database around a PostgreSQL store already connected to `schema` (one a test
    /// migrated step by step).
    pub fn postgres_of(store: PgStore, schema: &str) -> Self {
        Self { store: Arc::new(store.clone()), backend: Backend::Postgres(store, schema.to_owned()) }
    }

    /// A second store on the same database, as another replica of the hub opens it (on SQLite,
    /// another handle on the same file): what one remembers, the other does not share.
    pub async fn replica(&self) -> Arc<dyn Store> {
        match &self.backend {
            Backend::Sqlite(_, path) => Arc::new(SqliteStore::open(path).await.expect("open sqlite again")),
            Backend::Postgres(_, schema) => {
                Arc::new(PgStore::connect(&postgres_dsn(), Some(schema), 4).await.expect("connect again"))
            }
        }
    }

    /// The PostgreSQL schema of the test, for what only that backend has.
    pub fn schema(&self) -> Option<&str> {
        match &self.backend {
            Backend::Postgres(_, schema) => Some(schema),
            Backend::Sqlite(..) => None,
        }
    }

    /// The PostgreSQL store itself, for what only that backend has.
    pub fn postgres_store(&self) -> Option<&PgStore> {
        match &self.backend {
            Backend::Postgres(s, _) => Some(s),
            Backend::Sqlite(..) => None,
        }
    }

    /// The SQLite store itself, for what only that backend has.
    pub fn sqlite_store(&self) -> Option<&SqliteStore> {
        match &self.backend {
            Backend::Sqlite(s, _) => Some(s),
            Backend::Postgres(..) => None,
        }
    }

    /// Runs raw SQL against the test database (to inject failures or read raw rows).
    pub async fn execute(&self, sql: &str) {
        match &self.backend {
            Backend::Sqlite(s, _) => {
                sqlx::query(sql).execute(s.writer_pool()).await.expect("raw sql");
            }
            Backend::Postgres(s, _) => {
                sqlx::query(sql).execute(s.pool()).await.expect("raw sql");
            }
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Backend::Sqlite(_, path) = &self.backend {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
        }
    }
}

pub fn headers(tenant: &str, id: Uuid, resource: &str, event: &str) -> Vec<(String, String)> {
    hub_testkit::event_headers(tenant, id, resource, event)
}

pub use hub_testkit::{accepted_with, subscription};

pub fn accepted(tenant: &str, id: Uuid) -> IngestRecord {
    accepted_with(headers(tenant, id, "loan_application", "approved"), br#"{"amount":1}"#)
}

pub fn quarantined(headers: Vec<(String, String)>, body: &[u8], origin: Origin) -> IngestRecord {
    match judge(headers.clone(), body, None, &IngestPolicy::default()) {
        Verdict::Quarantine(reason) => {
            IngestRecord::Quarantined(QuarantinedRecord::capture(headers, body, reason, origin, Utc::now()))
        }
        other => panic!("test record not quarantined: {other:?}"),
    }
}

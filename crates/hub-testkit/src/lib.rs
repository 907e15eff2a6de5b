//! Test support shared by the test suites of every crate and by the benches (a dev-dependency of
//! the product; nothing here ships in its binary): the PostgreSQL the tests use and a fresh schema
//! per test, the check a webhook receiver makes of a delivery's signatures, and Apache Kafka
//! ([`kafka`]).
#![forbid(unsafe_code)]

pub mod forwarder;
pub mod kafka;
pub mod nats;
pub mod pubsub;
pub mod tls;

use axum::http::HeaderMap;
use hub_store::PgStore;
use uuid::Uuid;

/// The PostgreSQL server the tests use (`STREAMING_HUB_TEST_POSTGRES_DSN`); `scripts/test`
/// makes sure it runs.
pub fn postgres_dsn() -> String {
    std::env::var("STREAMING_HUB_TEST_POSTGRES_DSN")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable".to_owned())
}

/// Creates an empty schema (`shtest_*`, dropped by the next `scripts/test`) for one test.
/// PostgreSQL is required: without it the test fails, never skips.
pub async fn fresh_schema() -> String {
    let dsn = postgres_dsn();
    let schema = format!("shtest_{}", Uuid::now_v7().simple());
    let admin = PgStore::connect(&dsn, None, 1)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is required for these tests ({dsn}): {e}"));
    sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(admin.pool()).await.expect("create schema");
    admin.pool().close().await;
    schema
}

/// The headers of a valid binary-mode CloudEvent of `tenant` from the `lender` application, with
/// this id and event key.
pub fn event_headers(tenant: &str, id: Uuid, resource: &str, event: &str) -> Vec<(String, String)> {
    [
        ("ce-specversion", "1.0".to_owned()),
        ("ce-id", id.to_string()),
        ("ce-source", "lender".to_owned()),
        ("ce-type", format!("studio.lerian.lender.{resource}.{event}")),
        ("ce-time", "2026-11-30T10:00:00Z".to_owned()),
        ("ce-schemaversion", "1.0.0".to_owned()),
        ("ce-resourcetype", resource.to_owned()),
        ("ce-eventtype", event.to_owned()),
        ("ce-tenantid", tenant.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Sets a header (replacing every earlier value of it).
pub fn set_header(headers: &mut Vec<(String, String)>, key: &str, value: &str) {
    headers.retain(|(k, _)| k != key);
    headers.push((key.to_owned(), value.to_owned()));
}

/// The last value of a header.
pub fn header<'a>(headers: &'a [(String, String)], key: &str) -> Option<&'a str> {
    headers.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Whether a delivery's `X-Webhook-Signature` headers include one made with any of `secrets`
/// over its `X-Webhook-Timestamp` and raw body, as a receiver checks it.
pub fn signature_verifies(headers: &HeaderMap, body: &[u8], secrets: &[String]) -> bool {
    let Some(ts) = headers.get("x-webhook-timestamp").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()) else {
        return false;
    };
    headers
        .get_all("x-webhook-signature")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|sig| secrets.iter().any(|s| hub_core::signature::verify(s, ts, body, sig)))
}

/// An accepted event of these headers and body, as ingest hands it to the store.
pub fn accepted_with(headers: Vec<(String, String)>, payload: &[u8]) -> hub_store::IngestRecord {
    match hub_core::judge(headers, payload, None, &hub_core::IngestPolicy::default()) {
        hub_core::Verdict::Accept(envelope) => hub_store::IngestRecord::Accepted(hub_store::AcceptedEvent {
            envelope: *envelope,
            payload: payload.to_vec(),
            origin: hub_store::Origin::Http,
            received_at: chrono::Utc::now(),
            trace: None,
        }),
        other => panic!("test event not accepted: {other:?}"),
    }
}

/// An active, enabled subscription of `tenant` to `types`, with no secret.
pub fn subscription(
    tenant: &str,
    sink: hub_core::SinkKind,
    types: &[&str],
    origin: Option<&str>,
) -> hub_store::SubscriptionRecord {
    let now = chrono::Utc::now();
    hub_store::SubscriptionRecord {
        id: Uuid::now_v7(),
        tenant_id: tenant.to_owned(),
        name: "test".to_owned(),
        event_types: types.iter().map(|t| (*t).to_owned()).collect(),
        origin: origin.map(str::to_owned),
        filters: serde_json::json!([]),
        transform: None,
        ordering: hub_core::Ordering::None,
        sink,
        limits: Default::default(),
        allowed_rate: None,
        sink_config: serde_json::json!({"type": sink.as_str()}),
        signing_secret: None,
        previous_secret: None,
        previous_secret_expires_at: None,
        credentials: None,
        enabled: true,
        verification: hub_core::VerificationState::Active,
        verification_error: None,
        disabled_reason: None,
        disabled_at: None,
        failing_since: None,
        last_failure_at: None,
        pull_cursor: 0,
        pace_bucket: None,
        created_at: now,
        updated_at: now,
    }
}

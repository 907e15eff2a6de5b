//! Traces: a hub process exporting over OTLP (`http/protobuf`) to a receiver in the test, which
//! decodes what arrives. One event's spans form one trace: the producer's span → `ingest` →
//! `write` → `job` → `attempt`, over HTTP on both backends and over Apache Kafka.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

use crate::on_both_backends;
use crate::receiver::{Receiver, Script};
use crate::support::{Backend, Event, HubProcess, fresh_schema, postgres_dsn, temp_sqlite_path};

/// A span as the receiver got it.
#[derive(Debug, Clone)]
struct Got {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: HashMap<String, String>,
    service: String,
}

type Spans = Arc<Mutex<Vec<Got>>>;

/// An OTLP/HTTP trace receiver: `POST /v1/traces` with a protobuf body.
async fn otlp_receiver() -> (String, Spans) {
    async fn traces(State(spans): State<Spans>, body: Bytes) -> Vec<u8> {
        let request = ExportTraceServiceRequest::decode(body).expect("an OTLP trace export");
        let mut got = spans.lock().expect("lock");
        for resource in request.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|a| a.key == "service.name")
                .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    got.push(Got {
                        name: span.name.clone(),
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent: hex(&span.parent_span_id),
                        attributes: span
                            .attributes
                            .iter()
                            .map(|a| (a.key.clone(), text(a.value.as_ref().and_then(|v| v.value.as_ref()))))
                            .collect(),
                        service: service.clone(),
                    });
                }
            }
        }
        ExportTraceServiceResponse::default().encode_to_vec()
    }
    let spans: Spans = Arc::default();
    let app = axum::Router::new().route("/v1/traces", post(traces)).with_state(Arc::clone(&spans));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    (format!("http://{addr}"), spans)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(n)) => n.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(x)) => x.to_string(),
        other => format!("{other:?}"),
    }
}

/// Waits until the trace `trace_id` has a span of each name; returns them by name.
async fn trace_of(spans: &Spans, trace_id: &str, names: &[&str]) -> HashMap<String, Got> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let found: HashMap<String, Got> = spans
            .lock()
            .expect("lock")
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .map(|s| (s.name.clone(), s.clone()))
            .collect();
        if names.iter().all(|n| found.contains_key(*n)) {
            return found;
        }
        let all: Vec<(String, String)> =
            spans.lock().expect("lock").iter().map(|s| (s.name.clone(), s.trace_id.clone())).collect();
        assert!(tokio::time::Instant::now() < deadline, "trace {trace_id} incomplete: {found:#?}; all spans: {all:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

on_both_backends!(one_events_trace_goes_from_the_producer_to_the_webhook_attempt);

async fn one_events_trace_goes_from_the_producer_to_the_webhook_attempt(backend: Backend) {
    let admin = format!("admin-{}", uuid::Uuid::now_v7().simple());
    let (otlp, spans) = otlp_receiver().await;
    let mut vars: Vec<(&str, String)> = match backend {
        Backend::Sqlite => vec![("STREAMING_HUB_SQLITE_PATH", temp_sqlite_path().display().to_string())],
        Backend::Postgres => {
            vec![
                ("STREAMING_HUB_POSTGRES_DSN", postgres_dsn()),
                ("STREAMING_HUB_POSTGRES_SCHEMA", fresh_schema().await),
            ]
        }
    };
    vars.extend([
        ("STREAMING_HUB_ADMIN_TOKEN", admin.clone()),
        ("STREAMING_HUB_DEV_KEK", "4b".repeat(32)),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
    ]);
    let receiver = Receiver::start(Script::Ok).await;
    let hub = HubProcess::start(&vars).await;
    let (key, sub, _) = hub.verified_webhook(&admin, &receiver).await;

    // The producer's own span, as its traceparent names it.
    let (producer_trace, producer_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let event = Event::new("t1").set("traceparent", &format!("00-{producer_trace}-{producer_span}-01"));
    hub.post_event(&key, &event).await;
    let got = receiver.wait_for(1, Duration::from_secs(20)).await;
    assert_eq!(
        got[0].header("traceparent"),
        format!("00-{producer_trace}-{producer_span}-01"),
        "the receiver still gets the producer's context"
    );

    let t = trace_of(&spans, producer_trace, &["ingest", "write", "job", "attempt"]).await;
    assert_eq!(t["ingest"].parent, producer_span, "ingest continues the producer's span");
    assert_eq!(t["write"].parent, t["ingest"].span_id);
    assert_eq!(t["job"].parent, t["write"].span_id, "the job continues the stored write span");
    assert_eq!(t["attempt"].parent, t["job"].span_id);
    assert_eq!(t["ingest"].attributes["ce_id"], event.id().to_string());
    assert_eq!(t["ingest"].attributes["verdict"], "accepted");
    assert_eq!(t["ingest"].attributes["tenant"], "t1");
    assert_eq!(t["job"].attributes["subscription"], sub);
    assert_eq!(t["job"].attributes["sink"], "webhook");
    assert_eq!(t["attempt"].attributes["outcome"], "delivered");
    assert_eq!(t["attempt"].attributes["http.response.status_code"], "204");
    assert_eq!(t["attempt"].attributes["delivery"], got[0].header("x-lerian-delivery-id"));
    assert!(t.values().all(|s| s.service == "streaming-hub"), "{t:#?}");

    // Without a producer context the hub starts the trace, and the job still joins it.
    let lone = Event::new("t1");
    hub.post_event(&key, &lone).await;
    receiver.wait_for(2, Duration::from_secs(20)).await;
    let ingest = {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let found = spans
                .lock()
                .expect("lock")
                .iter()
                .find(|s| s.name == "ingest" && s.attributes.get("ce_id") == Some(&lone.id().to_string()))
                .cloned();
            if let Some(found) = found {
                break found;
            }
            assert!(tokio::time::Instant::now() < deadline, "no ingest span for the second event");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert_eq!(ingest.parent, "", "a root span");
    let t = trace_of(&spans, &ingest.trace_id, &["ingest", "write", "job", "attempt"]).await;
    assert_eq!(t["job"].parent, t["write"].span_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_records_trace_continues_the_producers_header() {
    use crate::kafka_support::{Broker, KafkaPeer, Record, produce};

    let peer = KafkaPeer::start(Broker::Kafka).await;
    peer.create_topic("lerian.streaming.lender", 1).await;
    let admin = format!("admin-{}", uuid::Uuid::now_v7().simple());
    let (otlp, spans) = otlp_receiver().await;
    let vars: Vec<(&str, String)> = vec![
        ("STREAMING_HUB_SQLITE_PATH", temp_sqlite_path().display().to_string()),
        ("STREAMING_HUB_ADMIN_TOKEN", admin.clone()),
        ("STREAMING_HUB_DEV_KEK", "4b".repeat(32)),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
        ("STREAMING_HUB_KAFKA_BROKERS", peer.brokers.clone()),
        ("STREAMING_HUB_KAFKA_TOPIC_REFRESH", "1s".to_owned()),
        ("STREAMING_HUB_KAFKA_BATCH_WAIT", "20ms".to_owned()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
    ];
    let receiver = Receiver::start(Script::Ok).await;
    let hub = HubProcess::start(&vars).await;
    hub.verified_webhook(&admin, &receiver).await;

    let (producer_trace, producer_span) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let record =
        Record::event("lender", 0, "t1").set("traceparent", &format!("00-{producer_trace}-{producer_span}-01"));
    produce(&peer.producer(), std::slice::from_ref(&record)).await;
    receiver.wait_for(1, Duration::from_secs(30)).await;

    let t = trace_of(&spans, producer_trace, &["ingest", "write", "job", "attempt"]).await;
    assert_eq!(t["ingest"].parent, producer_span);
    assert_eq!(t["ingest"].attributes["origin"], "kafka");
    assert_eq!(t["ingest"].attributes["ce_id"], record.id());
    assert_eq!(t["job"].parent, t["write"].span_id);
    assert_eq!(t["attempt"].parent, t["job"].span_id);
}

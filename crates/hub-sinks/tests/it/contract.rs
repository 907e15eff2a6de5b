//! The contract every sink passes: delivered on success; a classified failure on refusal, an
//! unreachable destination, bad credentials and a timeout; and no secret in any failure text.

use std::collections::BTreeMap;
use std::time::Duration;

use hub_sinks::{FailureKind, Message, Outcome, TypedSink};
use uuid::Uuid;

/// The situations a sink is checked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Healthy,
    Refusing,
    Unreachable,
    BadCredentials,
    Slow,
}

/// What a sink's test fixture provides.
pub trait Fixture {
    type S: TypedSink;
    fn sink(&self) -> &Self::S;
    /// A target for the case (a slow one with a short timeout).
    async fn target(&self, case: Case) -> <Self::S as TypedSink>::Target;
    /// The bodies the healthy destination received, by event id, once `expected` arrived.
    async fn received(&self, expected: usize) -> Vec<(Uuid, Vec<u8>)>;
    /// Strings that must never appear in an outcome (credentials, secrets).
    fn secrets(&self) -> Vec<String>;
    /// False where the destination re-encodes JSON (EventBridge's `Detail`): bodies then compare
    /// as JSON values rather than bytes.
    fn exact_body(&self) -> bool {
        true
    }
    /// True where the refusing destination is one that cannot be fixed by retrying (a topic,
    /// stream or bucket that does not exist): the failure is then not retryable.
    fn refusal_is_permanent(&self) -> bool {
        false
    }
}

pub fn message<'a>(payload: &'a [u8], extensions: &'a BTreeMap<String, String>, id: Uuid) -> Message<'a> {
    Message {
        tenant: "tenant-a",
        subscription_id: Uuid::now_v7(),
        ce_id: id,
        source: "lender",
        ce_type: "studio.lerian.lender.loan_application.approved",
        resource_type: "loan_application",
        event_type: "approved",
        time: "2026-11-30T10:00:00Z",
        schema_version: "1.0.0",
        subject: Some("loan-42"),
        content_type: "application/json",
        data_schema: None,
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        tracestate: None,
        extensions,
        ordering_key: None,
        payload,
        headers: &[],
        path: "",
        attempt: 1,
        delivery_id: Uuid::now_v7(),
        sent: None,
    }
}

fn assert_no_secret(outcome: &Outcome, secrets: &[String]) {
    let text = format!("{outcome:?}");
    for s in secrets {
        assert!(!text.contains(s.as_str()), "an outcome reveals a secret: {text}");
    }
}

/// Runs the whole contract against one sink.
pub async fn run<F: Fixture>(fixture: &F) {
    let ext = BTreeMap::new();
    let secrets = fixture.secrets();

    let id = Uuid::now_v7();
    let body = br#"{"amount": 10, "exact": "bytes"}"#;
    let target = fixture.target(Case::Healthy).await;
    let outcome = fixture.sink().attempt(&target, &message(body, &ext, id)).await;
    assert!(outcome.is_delivered(), "healthy: {outcome:?}");
    let got = fixture.received(1).await;
    assert_eq!(got.len(), 1, "the destination got the event once");
    assert_eq!(got[0].0, id);
    if fixture.exact_body() {
        assert_eq!(got[0].1, body, "the exact body");
    } else {
        let parse = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).expect("json");
        assert_eq!(parse(&got[0].1), parse(body), "the same JSON body");
    }

    for (case, kind) in [
        (Case::Refusing, FailureKind::Refused),
        (Case::Unreachable, FailureKind::Unreachable),
        (Case::BadCredentials, FailureKind::Unauthorized),
        (Case::Slow, FailureKind::Timeout),
    ] {
        let target = fixture.target(case).await;
        let started = std::time::Instant::now();
        let outcome = fixture.sink().attempt(&target, &message(body, &ext, Uuid::now_v7())).await;
        match &outcome {
            Outcome::Failed(f) => {
                assert_eq!(f.kind, kind, "{case:?}: {f:?}");
                let permanent = case == Case::Refusing && fixture.refusal_is_permanent();
                assert_eq!(f.retryable, !permanent, "{case:?}: {f:?}");
                assert!(!f.reason.is_empty());
            }
            other => panic!("{case:?}: expected a failure, got {other:?}"),
        }
        assert_no_secret(&outcome, &secrets);
        assert!(started.elapsed() < Duration::from_secs(15), "{case:?} took {:?}", started.elapsed());
    }

    // A probe of the healthy destination succeeds; of a refusing one fails, classified.
    let healthy = fixture.target(Case::Healthy).await;
    fixture.sink().check(&healthy, "tenant-a", Uuid::now_v7()).await.expect("the probe of a healthy destination");
    let refusing = fixture.target(Case::Refusing).await;
    let err = fixture.sink().check(&refusing, "tenant-a", Uuid::now_v7()).await.expect_err("refused");
    assert_eq!(err.kind, FailureKind::Refused);
}

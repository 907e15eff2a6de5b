//! `POST /v1/subscriptions/{id}/test`: a test event through the normal path to one subscription
//! only, answered with the attempt's outcome.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::receiver::{Receiver, Script};
use crate::support::{Backend, TestHub};

crate::on_both_backends!(
    a_test_event_reaches_its_one_subscription_and_answers_the_attempt,
    a_tenant_waits_for_at_most_eight_tests_at_once
);

async fn a_test_event_reaches_its_one_subscription_and_answers_the_attempt(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Ok).await;
    let other_receiver = Receiver::start(Script::Ok).await;
    let webhook = |name: &str, types: serde_json::Value, url: &str| json!({"name": name, "event_types": types, "sink": {"type": "webhook", "url": url}});
    // Its patterns name no test event: a test still reaches it.
    let target = hub.subscribe(&key, webhook("target", json!(["account.created"]), &receiver.url)).await;
    // Another subscription of the tenant that takes every event and the hub's notices.
    let other = hub.subscribe(&key, webhook("other", json!(["*.*", "streaming_hub.*"]), &other_receiver.url)).await;
    receiver.trust(target["signing_secret"].as_str().expect("secret"));
    let (target_id, other_id) = (target["id"].as_str().expect("id"), other["id"].as_str().expect("id"));
    hub.wait_until_active(&key, target_id).await;
    hub.wait_until_active(&key, other_id).await;

    let (status, answer) = hub.post_json(&key, &format!("/v1/subscriptions/{target_id}/test"), &json!(null)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["outcome"], "delivered", "{answer}");
    let attempt = &answer["delivery"]["attempt_log"][0];
    assert_eq!(
        (attempt["outcome"].as_str(), attempt["status_code"].as_i64()),
        (Some("delivered"), Some(204)),
        "{answer}"
    );
    let got = receiver.wait_for(1, Duration::from_secs(10)).await;
    let test = got.iter().find(|d| d.header("x-lerian-event-type") == "streaming_hub.test").expect("the test event");
    assert!(test.verified, "signed like any delivery");
    assert_eq!(test.header("x-lerian-event-id"), answer["ce_id"].as_str().expect("ce_id"));
    let body: serde_json::Value = serde_json::from_slice(&test.body).expect("JSON");
    assert_eq!(body["subscription_id"], target_id);

    // It is in the event log, with one delivery: the target's, none for the other subscription.
    let only_the_target = async || {
        let (_, detail) = hub.get(&key, &format!("/v1/events/{}", answer["ce_id"].as_str().expect("ce_id"))).await;
        let subs = detail["subscriptions"].as_array().expect("subscriptions").clone();
        assert_eq!(subs.len(), 1, "{detail}");
        assert_eq!(subs[0]["subscription_id"], target_id);
    };
    only_the_target().await;
    // A replay of everything into the other subscription does not give it the test event.
    let (status, replay) =
        hub.post_json(&key, &format!("/v1/subscriptions/{other_id}/replay"), &json!({"from_seq": 1})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{replay}");
    crate::support::until("the replay finished", Duration::from_secs(20), async || {
        let (_, r) =
            hub.get(&key, &format!("/v1/subscriptions/{other_id}/replays/{}", replay["replay_id"].as_str()?)).await;
        (r["state"] == "done").then_some(())
    })
    .await;
    only_the_target().await;

    // A failing destination: the attempt's failure is the answer, and the job retries.
    receiver.set_script(Script::Fail);
    let (status, failed) = hub.post_json(&key, &format!("/v1/subscriptions/{target_id}/test"), &json!(null)).await;
    assert_eq!((status, failed["outcome"].as_str()), (StatusCode::OK, Some("failed")), "{failed}");
    assert_eq!(failed["delivery"]["attempt_log"][0]["status_code"], 503);
    assert_eq!(failed["delivery"]["state"], "pending", "retried on the curve: {failed}");

    // Paused: refused.
    let (_, _) = hub.patch_json(&key, &format!("/v1/subscriptions/{target_id}"), &json!({"enabled": false})).await;
    let (status, refused) = hub.post_json(&key, &format!("/v1/subscriptions/{target_id}/test"), &json!(null)).await;
    assert_eq!((status, refused["title"].as_str()), (StatusCode::CONFLICT, Some("not_deliverable")), "{refused}");

    // A pull subscription: the test event is in its stream.
    let pull = hub.subscribe(&key, json!({"name": "pull", "event_types": ["loan.*"], "sink": {"type": "pull"}})).await;
    let pull_id = pull["id"].as_str().expect("id");
    let (status, queued) = hub.post_json(&key, &format!("/v1/subscriptions/{pull_id}/test"), &json!(null)).await;
    assert_eq!((status, queued["outcome"].as_str()), (StatusCode::OK, Some("queued")), "{queued}");
    let (_, page) = hub.get(&key, &format!("/v1/subscriptions/{pull_id}/events")).await;
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{page}");
    assert_eq!(items[0]["ceId"], queued["ce_id"], "{page}");

    // Another tenant cannot test this tenant's subscription.
    let k2 = hub.tenant_key("t2").await;
    let (status, _) = hub.post_json(&k2, &format!("/v1/subscriptions/{pull_id}/test"), &json!(null)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Each test request holds its connection until the attempt ends: a tenant whose destination
/// hangs gets `429` past eight waiting at once (its refused request writes nothing), and the
/// places come back when the answers go.
async fn a_tenant_waits_for_at_most_eight_tests_at_once(backend: Backend) {
    // The answer waits a second less than the request timeout: 4 s here.
    let hub = TestHub::start_with(backend, &[("STREAMING_HUB_HTTP_REQUEST_TIMEOUT", "5s")]).await;
    let key = hub.tenant_key("t1").await;
    let hanging = Receiver::start(Script::Ok).await;
    let fine = Receiver::start(Script::Ok).await;
    let webhook = |url: &str| json!({"name": "w", "event_types": ["a.b"], "sink": {"type": "webhook", "url": url, "timeout_ms": 60000}});
    let stuck = hub.subscribe(&key, webhook(&hanging.url)).await;
    let other = hub.subscribe(&key, webhook(&fine.url)).await;
    let (stuck, other) = (stuck["id"].as_str().expect("id"), other["id"].as_str().expect("id"));
    hub.wait_until_active(&key, stuck).await;
    hub.wait_until_active(&key, other).await;
    hanging.set_script(Script::Hang);

    let test_path = format!("/v1/subscriptions/{stuck}/test");
    let tests_in_log = async || {
        let (_, page) = hub.get(&key, "/v1/events?event_type=streaming_hub.test").await;
        page["items"].as_array().map_or(0, Vec::len)
    };
    let waiting = futures_util::future::join_all((0..8).map(|_| hub.post_json(&key, &test_path, &json!(null))));
    let refused = async {
        // Each request writes its event once it holds its place: eight in the log, eight waiting.
        crate::support::until("eight tests waiting", Duration::from_secs(10), async || {
            (tests_in_log().await == 8).then_some(())
        })
        .await;
        let response = hub.client.post(hub.url(&test_path)).bearer_auth(&key).json(&json!(null)).send().await;
        let response = response.expect("request");
        let status = response.status();
        let retry_after = response.headers().get("retry-after").cloned();
        let body: serde_json::Value = response.json().await.expect("JSON");
        assert_eq!((status, body["title"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("rate_limited")), "{body}");
        assert!(body["message"].as_str().expect("message").contains("waiting"), "{body}");
        assert!(retry_after.is_some(), "Retry-After");
        assert_eq!(tests_in_log().await, 8, "a refused test writes no event");
    };
    let (answers, ()) = tokio::join!(waiting, refused);
    for (status, answer) in answers {
        assert_eq!((status, answer["outcome"].as_str()), (StatusCode::ACCEPTED, Some("pending")), "{answer}");
    }
    // The places came back: the tenant's next test is answered.
    let (status, answer) = hub.post_json(&key, &format!("/v1/subscriptions/{other}/test"), &json!(null)).await;
    assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("delivered")), "{answer}");
}

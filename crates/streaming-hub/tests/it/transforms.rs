//! `POST /v1/transforms/test`: a transform tried on an event in the delivery sandbox, through the
//! API: its output, a skip, a throw with its logs, a budget, and code refused with its position.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Backend, TestHub};

fn event() -> Value {
    json!({"type": "payment.settled", "source": "//lender", "id": "01890a5d-ac96-774b-bcce-b302099a8057",
           "time": "2026-12-05T12:00:00Z", "extensions": {}, "data": {"amount": 100, "cpf": "123"}, "headers": {}, "path": ""})
}

fn try_code(code: &str) -> Value {
    json!({"transform": {"language": "javascript", "code": code}, "event": event()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_is_tried_on_an_event_in_the_sandbox() {
    let hub = TestHub::start_with(Backend::Sqlite, &[("STREAMING_HUB_TRANSFORM_CPU", "20ms")]).await;
    let key = hub.tenant_key("t1").await;
    let path = "/v1/transforms/test";

    let (status, got) = hub
        .post_json(&key, path, &try_code("function handler(e) { console.log('in', e.data.amount); delete e.data.cpf; e.headers['x-team'] = 'risk'; return e; }"))
        .await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got["output"]["data"], json!({"amount": 100}));
    assert_eq!(got["output"]["headers"], json!({"x-team": "risk"}));
    assert_eq!(got["logs"], json!(["in 100"]));
    assert!(got["duration_us"].is_u64() && got.get("error").is_none());

    let (_, skipped) = hub.post_json(&key, path, &try_code("function handler(e) { return null; }")).await;
    assert_eq!((skipped["output"].clone(), skipped.get("error")), (Value::Null, None), "{skipped}");
    assert!(skipped.as_object().is_some_and(|o| o.contains_key("output")), "a skip answers output null: {skipped}");

    let (status, thrown) = hub
        .post_json(
            &key,
            path,
            &try_code("function handler(e) { console.log('before'); throw new Error('no amount'); }"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(thrown["error"].as_str().unwrap_or_default().contains("no amount"), "{thrown}");
    assert_eq!(thrown["logs"], json!(["before"]));
    assert!(thrown.get("output").is_none());

    let (_, looping) = hub.post_json(&key, path, &try_code("function handler(e) { for (;;) {} }")).await;
    assert!(looping["error"].as_str().unwrap_or_default().contains("CPU budget of 20 ms"), "{looping}");

    for (body, field) in [
        (try_code("function handler(e) {\n  return e.;\n}"), "transform.code"),
        (try_code("function other(e) { return e; }"), "transform.code"),
        (json!({"transform": {"language": "lua", "code": "x"}, "event": event()}), "transform.language"),
        (
            json!({"transform": {"language": "javascript", "code": "function handler(e) { return e; }"}, "event": [1]}),
            "event",
        ),
    ] {
        let (status, refused) = hub.post_json(&key, path, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {refused}");
        assert!(refused["message"].as_str().unwrap_or_default().starts_with(&format!("{field}:")), "{refused}");
    }
    let (_, syntax) = hub.post_json(&key, path, &try_code("function handler(e) {\n  return e.;\n}")).await;
    assert!(syntax["message"].as_str().unwrap_or_default().contains("line 2"), "the position: {syntax}");
    let anonymous =
        hub.client.post(hub.url(path)).json(&try_code("function handler(e) { return e; }")).send().await.expect("post");
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

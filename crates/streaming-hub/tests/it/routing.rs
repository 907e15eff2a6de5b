//! Routing by content (SPEC §9) through the API on both backends: filters in every dialect
//! choose what a webhook and a pull subscription receive, a PATCH changes them for later events,
//! invalid filters are refused with a 422 naming the filter (and for CESQL the character), and
//! `POST /v1/filters/test` tells each filter's result.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::on_both_backends;
use crate::receiver::{Receiver, Script};
use crate::support::{Backend, Event, TestHub};

on_both_backends!(
    filters_choose_what_a_webhook_and_a_pull_stream_receive,
    invalid_filters_are_refused_naming_the_filter,
    filters_can_be_tried_against_an_event,
    a_costly_filter_runs_out_of_its_budget_and_stalls_nobody,
);

const WAIT: Duration = Duration::from_secs(20);

/// A loan event with this subject, region extension and body.
fn loan(subject: &str, region: &str, body: Value) -> Event {
    Event::of("t1", "loan_application", "approved")
        .set("ce-subject", subject)
        .set("ce-region", region)
        .body(body.to_string().into_bytes())
}

async fn post(hub: &TestHub, key: &str, events: &[Event]) -> Vec<String> {
    let mut ids = Vec::new();
    for e in events {
        let (status, body) = hub.post_event(key, e).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        ids.push(e.id().to_string());
    }
    ids
}

/// The ce-ids a subscription has deliveries for (jobs are created in the ingest transaction, so
/// this is exact as soon as the posts were answered).
async fn delivered_ids(hub: &TestHub, key: &str, sub: &Value) -> Vec<String> {
    let path = format!("/v1/subscriptions/{}/deliveries?limit=100", sub["id"].as_str().expect("id"));
    let (status, page) = hub.get(key, &path).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let mut ids: Vec<String> = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|d| d["ce_id"].as_str().expect("ce_id").to_owned())
        .collect();
    ids.sort();
    ids
}

async fn pulled_subjects(hub: &TestHub, key: &str, sub: &Value) -> Vec<String> {
    let path = format!("/v1/subscriptions/{}/events?limit=100", sub["id"].as_str().expect("id"));
    let (status, page) = hub.get(key, &path).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["items"].as_array().expect("items").iter().map(|i| i["subject"].as_str().unwrap_or("").to_owned()).collect()
}

async fn filters_choose_what_a_webhook_and_a_pull_stream_receive(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Ok).await;
    let hook = hub
        .subscribe(
            &key,
            json!({"name": "big-br", "event_types": ["loan_application.*"], "sink": {"type": "webhook", "url": receiver.url},
                   "filters": [{"sql": "region = 'br' AND subject LIKE 'loan-%'"},
                               {"data": {"amount": [{"numeric": [">=", 1000]}], "currency": [{"anything-but": "USD"}]}}]}),
        )
        .await;
    assert_eq!(hook["filters"][0]["sql"], "region = 'br' AND subject LIKE 'loan-%'", "{hook}");
    receiver.trust(hook["signing_secret"].as_str().expect("secret"));
    hub.wait_until_active(&key, hook["id"].as_str().expect("id")).await;
    let pull = hub
        .subscribe(
            &key,
            json!({"name": "mx", "event_types": ["*.*"], "sink": {"type": "pull"},
                   "filters": [{"any": [{"exact": {"region": "mx"}}, {"suffix": {"subject": "-vip"}}]}]}),
        )
        .await;

    let events = [
        loan("loan-1", "br", json!({"amount": 5000, "currency": "BRL"})),
        loan("loan-2", "br", json!({"amount": 10, "currency": "BRL"})),
        loan("loan-3", "br", json!({"amount": 5000, "currency": "USD"})),
        loan("card-4", "br", json!({"amount": 5000, "currency": "BRL"})),
        loan("loan-5", "mx", json!({"amount": 9000, "currency": "MXN"})),
        loan("loan-6-vip", "br", json!({"amount": 1000, "currency": "EUR"})),
    ];
    let ids = post(&hub, &key, &events).await;
    let mut wanted = vec![ids[0].clone(), ids[5].clone()];
    wanted.sort();
    assert_eq!(delivered_ids(&hub, &key, &hook).await, wanted, "only what both filters let through");
    let got = receiver.wait_for(2, WAIT).await;
    let mut arrived: Vec<String> = got.iter().map(|d| d.header("x-lerian-event-id")).collect();
    arrived.sort();
    assert_eq!(arrived, wanted);
    assert_eq!(pulled_subjects(&hub, &key, &pull).await, vec!["loan-5", "loan-6-vip"]);

    // A changed filter applies to events ingested after the change.
    let path = format!("/v1/subscriptions/{}", hook["id"].as_str().expect("id"));
    let (status, changed) = hub.patch_json(&key, &path, &json!({"filters": [{"exact": {"region": "mx"}}]})).await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["filters"], json!([{"exact": {"region": "mx"}}]));
    assert_eq!(changed["verification_state"], "active", "a filter change needs no new verification");
    let later = post(&hub, &key, &[loan("loan-7", "br", json!({})), loan("loan-8", "mx", json!({}))]).await;
    wanted.push(later[1].clone());
    wanted.sort();
    assert_eq!(delivered_ids(&hub, &key, &hook).await, wanted);
    let (status, cleared) = hub.patch_json(&key, &path, &json!({"filters": null})).await;
    assert_eq!(status, StatusCode::OK, "{cleared}");
    assert_eq!(cleared["filters"], json!([]));
    receiver.wait_for(3, WAIT).await;
}

async fn invalid_filters_are_refused_naming_the_filter(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let create =
        |filters: Value| json!({"name": "x", "event_types": ["*.*"], "sink": {"type": "pull"}, "filters": filters});
    let cases = [
        (json!([{"sql": "subject = = 'x'"}]), "filters[0].sql: at character 11: expected an expression, found '='"),
        (
            json!([{"sql": "subject LIKE 1"}]),
            "filters[0].sql: at character 14: LIKE needs a string literal as its pattern",
        ),
        (
            json!([{"sql": "NOPE(subject)"}]),
            "filters[0].sql: at character 1: there is no function NOPE taking 1 argument(s)",
        ),
        (json!([{"sql": "1 + 1"}]), "filters[0].sql: the expression answers an Integer; a filter needs a Boolean"),
        (json!([{"exact": {"subject": "a"}}, {"regex": {"subject": "a"}}]), "filters[1]: unknown filter dialect"),
        (
            json!([{"all": [{"data": {"amount": [{"numeric": ["~", 1]}]}}]}]),
            "filters[0].all[0].data.amount[0].numeric:",
        ),
        (json!({"exact": {"subject": "a"}}), "filters: must be an array"),
    ];
    for (filters, message) in cases {
        let (status, body) = hub.post_json(&key, "/v1/subscriptions", &create(filters.clone())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{filters}: {body}");
        assert_eq!(body["title"], "validation_failed");
        assert!(body["message"].as_str().expect("message").starts_with(message), "{filters}: {body}");
    }
    let long = format!("subject = '{}'", "x".repeat(5000));
    let (status, body) = hub.post_json(&key, "/v1/subscriptions", &create(json!([{"sql": long}]))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // A refused PATCH changes nothing.
    let sub = hub.subscribe(&key, create(json!([{"exact": {"subject": "a"}}]))).await;
    let path = format!("/v1/subscriptions/{}", sub["id"].as_str().expect("id"));
    let (status, body) = hub.patch_json(&key, &path, &json!({"filters": [{"sql": "("}], "name": "y"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (_, stored) = hub.get(&key, &path).await;
    assert_eq!(stored["filters"], json!([{"exact": {"subject": "a"}}]));
    assert_eq!(stored["name"], "x");
}

async fn filters_can_be_tried_against_an_event(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let event = json!({"specversion": "1.0", "id": "0192a4e0-0000-7000-8000-000000000001", "source": "lender",
                       "type": "studio.lerian.lender.loan_application.approved", "subject": "loan-7", "region": "br",
                       "datacontenttype": "application/json", "data": {"amount": 1200}});
    let body = json!({"filters": [{"exact": {"region": "br"}}, {"sql": "missing = 1"}, {"data": {"amount": [{"numeric": [">", 1000]}]}}],
                      "event": event});
    let (status, answer) = hub.post_json(&key, "/v1/filters/test", &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["matches"], false);
    assert_eq!(answer["results"][0], json!({"matches": true, "error": null}));
    assert_eq!(answer["results"][1]["matches"], false);
    assert!(answer["results"][1]["error"].as_str().expect("error").starts_with("missingAttribute"), "{answer}");
    assert_eq!(answer["results"][2], json!({"matches": true, "error": null}));
    let (status, answer) =
        hub.post_json(&key, "/v1/filters/test", &json!({"filters": [{"sql": "region ="}], "event": event})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(answer["message"].as_str().expect("message").starts_with("filters[0].sql: at character 9"), "{answer}");
    let anonymous = crate::support::http_client().post(hub.url("/v1/filters/test"));
    let (status, _) = hub.send(anonymous.json(&json!({"filters": [], "event": {}}))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// The fourth review's attacks: a `LIKE` that backtracks over a 1.9 MB subject and a `CONCAT` of
/// it 450 times answer the error `budget` (or a function error) in `filters/test`; at ingest,
/// four 1 024-character wildcards over a ~1 MB body run out of the budget: the event is accepted,
/// the subscription does not get it, the metric counts it, and another tenant's posts are answered
/// meanwhile (evaluation runs off the threads that serve HTTP).
async fn a_costly_filter_runs_out_of_its_budget_and_stalls_nobody(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let (key, other) = (hub.tenant_key("t1").await, hub.tenant_key("t2").await);
    let subject = "a".repeat(1_900_000);
    let event = json!({"specversion": "1.0", "id": "0192a4e0-0000-7000-8000-000000000001", "source": "lender",
                       "type": "studio.lerian.lender.loan_application.approved", "subject": subject});
    let like = format!("subject LIKE '%{}b'", "a".repeat(4_000));
    let concat = format!("LENGTH(CONCAT({})) > 0", vec!["subject"; 450].join(", "));
    let body = json!({"filters": [{"sql": like}, {"sql": concat}], "event": event});
    let (status, answer) = hub.post_json(&key, "/v1/filters/test", &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["matches"], false);
    let errors: Vec<&str> =
        answer["results"].as_array().expect("results").iter().map(|r| r["error"].as_str().unwrap_or("")).collect();
    assert!(errors[0].starts_with("budget"), "{errors:?}");
    assert!(errors[1].starts_with("budget") || errors[1].contains("builds at most"), "{errors:?}");

    let wild = format!("*{}b*", "a".repeat(1_020));
    let sub = hub
        .subscribe(
            &key,
            json!({"name": "costly", "event_types": ["loan_application.*"], "sink": {"type": "pull"},
                   "filters": [{"data": {"s": [{"wildcard": wild}, {"wildcard": wild}, {"wildcard": wild}, {"wildcard": wild}]}}]}),
        )
        .await;
    let big = loan("big", "br", json!({"s": "a".repeat(1_000_000)}));
    let posting = {
        let (hub, key) = (&hub, key.clone());
        async move { hub.post_event(&key, &big).await }
    };
    // Another tenant's posts go on while the costly one is matched.
    let beside = async {
        let mut answered = 0;
        for _ in 0..5 {
            let e = Event::of("t2", "loan_application", "approved");
            assert_eq!(hub.post_event(&other, &e).await.0, StatusCode::ACCEPTED);
            answered += 1;
        }
        answered
    };
    let ((status, answer), answered) = tokio::join!(posting, beside);
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answered, 5);
    assert!(pulled_subjects(&hub, &key, &sub).await.is_empty(), "over its budget, the filter does not match");
    let text = hub.client.get(hub.url("/metrics")).send().await.expect("scrape").text().await.expect("text");
    assert!(
        text.lines().any(|l| l.starts_with("streaming_hub_filter_budget_exceeded_total{tenant=\"t1\"}")),
        "the metric counts it"
    );
}

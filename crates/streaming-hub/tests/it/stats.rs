//! `GET /v1/subscriptions/{id}/stats`: per-minute deliveries, failures, dead letters, latency and
//! backlog, after a burst with failures.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::receiver::{Receiver, Script};
use crate::support::{Backend, Event, TestHub, until};

crate::on_both_backends!(a_burst_with_failures_reads_back_per_minute);

fn sum(stats: &Value, field: &str) -> i64 {
    stats["buckets"].as_array().expect("buckets").iter().map(|b| b[field].as_i64().unwrap_or(0)).sum()
}

async fn a_burst_with_failures_reads_back_per_minute(backend: Backend) {
    // Two attempts a job, the second 200 ms after the first; backlogs sampled often.
    let hub = TestHub::start_with(
        backend,
        &[
            ("STREAMING_HUB_RETRY_CURVE", "0s,200ms"),
            ("STREAMING_HUB_METRICS_INTERVAL", "200ms"),
            // Every failure is an attempt: the breaker does not hold B's jobs back.
            ("STREAMING_HUB_BREAKER_FAILURES", "1000"),
        ],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let (ok, failing, held) =
        (Receiver::start(Script::Ok).await, Receiver::start(Script::Ok).await, Receiver::start(Script::Ok).await);
    let hook = |name: &str, r: &Receiver| json!({"name": name, "event_types": ["*.*"], "sink": {"type": "webhook", "url": r.url}});
    let a = hub.subscribe(&key, hook("ok", &ok)).await["id"].as_str().expect("id").to_owned();
    let b = hub.subscribe(&key, hook("failing", &failing)).await["id"].as_str().expect("id").to_owned();
    let c = hub.subscribe(&key, hook("held", &held)).await["id"].as_str().expect("id").to_owned();
    for id in [&a, &b, &c] {
        hub.wait_until_active(&key, id).await;
    }
    // B's destination now fails every attempt; C's is being verified again (its probe waits),
    // so its new events are held.
    failing.set_script(Script::Fail);
    held.open_probes(false);
    let (status, _) = hub
        .patch_json(
            &key,
            &format!("/v1/subscriptions/{c}"),
            &json!({"sink": {"type": "webhook", "url": format!("{}?v=2", held.url)}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    for _ in 0..6 {
        assert_eq!(hub.post_event(&key, &Event::new("t1")).await.0, StatusCode::ACCEPTED);
    }
    ok.wait_for(6, Duration::from_secs(20)).await;

    let stats = |id: String, window: &'static str| {
        let (hub, key) = (&hub, &key);
        async move {
            let (status, s) = hub.get(key, &format!("/v1/subscriptions/{id}/stats?window={window}")).await;
            assert_eq!(status, StatusCode::OK, "{s}");
            s
        }
    };
    let a_stats = until("A's six deliveries counted", Duration::from_secs(20), async || {
        let s = stats(a.clone(), "1h").await;
        (sum(&s, "delivered") == 6).then_some(s)
    })
    .await;
    let buckets = a_stats["buckets"].as_array().expect("buckets");
    assert_eq!(buckets.len(), 60);
    assert_eq!(a_stats["window"], "1h");
    assert_eq!((sum(&a_stats, "failed"), sum(&a_stats, "dead")), (0, 0));
    let busy = buckets.iter().find(|b| b["delivered"].as_i64() > Some(0)).expect("a minute with deliveries");
    let (p50, p99) = (busy["latency_p50_ms"].as_f64().expect("p50"), busy["latency_p99_ms"].as_f64().expect("p99"));
    assert!(p50 > 0.0 && p50 <= p99 && p99 < 5_000.0, "{busy}");
    assert!(buckets.iter().filter(|b| b["delivered"] == 0).all(|b| b["latency_p50_ms"].is_null()));
    let minutes: Vec<&str> = buckets.iter().map(|b| b["minute"].as_str().expect("minute")).collect();
    assert!(minutes.windows(2).all(|w| w[0] < w[1]), "oldest first");

    // B: every job failed twice, then was dead-lettered.
    let b_stats = until("B's failures and dead letters counted", Duration::from_secs(20), async || {
        let s = stats(b.clone(), "1h").await;
        (sum(&s, "dead") == 6).then_some(s)
    })
    .await;
    assert_eq!((sum(&b_stats, "delivered"), sum(&b_stats, "failed")), (0, 12), "{b_stats}");

    // C: six held jobs, sampled as its backlog.
    until("C's backlog sampled", Duration::from_secs(20), async || {
        let s = stats(c.clone(), "1h").await;
        (s["buckets"].as_array()?.last()?["backlog"] == 6).then_some(())
    })
    .await;
    // Its probe goes through: the held jobs are delivered, and the backlog reads 0 again.
    held.open_probes(true);
    hub.wait_until_active(&key, &c).await;
    until("C's backlog emptied", Duration::from_secs(30), async || {
        let s = stats(c.clone(), "1h").await;
        (s["buckets"].as_array()?.last()?["backlog"] == 0 && sum(&s, "delivered") == 6).then_some(())
    })
    .await;

    let day = stats(a.clone(), "24h").await;
    assert_eq!(day["buckets"].as_array().expect("buckets").len(), 1440);
    assert_eq!(sum(&day, "delivered"), 6);
    let (status, bad) = hub.get(&key, &format!("/v1/subscriptions/{a}/stats?window=7d")).await;
    assert_eq!((status, bad["title"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_query")));
    // Another tenant's subscription is not found.
    let k2 = hub.tenant_key("t2").await;
    assert_eq!(hub.get(&k2, &format!("/v1/subscriptions/{a}/stats")).await.0, StatusCode::NOT_FOUND);
}

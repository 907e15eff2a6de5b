//! The `portal` scenario: the console's reads on a large tenant — 10 000 subscriptions and up to
//! 1 000 000 events in its inbox — each timed from outside as the page makes it (a page of 100,
//! a page deep behind a cursor, a search for a rare type, one event's fan-out over every
//! subscription, the catalog, a day of statistics). The page never loads more than a page.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{self, BenchHub, f1, report};

/// Times of each read.
const SAMPLES: usize = 20;

fn quantiles(mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

/// `portal`: `subscriptions` subscriptions and `events` events of one tenant, then each read.
pub async fn portal(subscriptions: usize, events: usize, producers: usize, json_out: &Path) -> anyhow::Result<()> {
    let quota = (subscriptions + 1).to_string();
    let hub = Arc::new(BenchHub::start_with(None, &[("STREAMING_HUB_MAX_SUBSCRIPTIONS_PER_TENANT", quota)]).await?);
    let key = hub.tenant("portal").await?;
    // The subscriptions: one pull subscription takes the events; the others want types nobody
    // sends (as a platform's many tenants' subscriptions mostly do), so the inbox grows by one
    // stream entry an event.
    hub.subscribe_with(&key, json!({"name": "reader", "event_types": ["payment.*"], "sink": {"type": "pull"}})).await?;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(1));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (hub, key, next) = (Arc::clone(&hub), key.clone(), Arc::clone(&next));
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= subscriptions {
                    return Ok::<_, anyhow::Error>(());
                }
                let body = json!({"name": format!("sub-{i:05}"), "event_types": [format!("res{i}.created")], "sink": {"type": "pull"}});
                let (status, answer, _) = hub.call(Method::POST, "/v1/subscriptions", Some(&key), Some(&body)).await?;
                anyhow::ensure!(status == 201, "creating a subscription: {status} {answer}");
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let who = [(key.clone(), "portal".to_owned())];
    let loaded = Instant::now();
    hub.post_many(&who, events, producers).await?;
    let load_s = loaded.elapsed().as_secs_f64();
    hub.wait_inbox(events as i64, Duration::from_secs(600)).await?;
    // A rare type at the very end of the inbox: a search walks the tenant's events for it.
    let mut headers = harness::ce_headers("portal").to_vec();
    for (k, v) in &mut headers {
        match *k {
            "ce-type" => *v = "studio.lerian.bench.account.closed".to_owned(),
            "ce-resourcetype" => *v = "account".to_owned(),
            "ce-eventtype" => *v = "closed".to_owned(),
            _ => {}
        }
    }
    let rare_id = headers.iter().find(|(k, _)| *k == "ce-id").map(|(_, v)| v.clone()).unwrap_or_default();
    let (status, answer) = hub.post_raw(&key, &headers, &harness::body(harness::now_us())).await?;
    anyhow::ensure!(status == 202, "the rare event: {status} {answer}");

    let (_, first, _) = hub.call(Method::GET, "/v1/subscriptions?limit=100", Some(&key), None).await?;
    let mut cursor = first["next_cursor"].as_str().unwrap_or_default().to_owned();
    for _ in 0..(subscriptions / 200) {
        let (_, page, _) =
            hub.call(Method::GET, &format!("/v1/subscriptions?limit=100&cursor={cursor}"), Some(&key), None).await?;
        cursor = page["next_cursor"].as_str().unwrap_or_default().to_owned();
    }
    let (_, events_page, _) = hub.call(Method::GET, "/v1/events?limit=100", Some(&key), None).await?;
    let sub_id = first["items"][0]["id"].as_str().unwrap_or_default().to_owned();
    let reads: Vec<(&str, String, Option<&str>)> = vec![
        ("subscriptions, first page of 100", "/v1/subscriptions?limit=100".into(), Some(&key)),
        ("subscriptions, a page halfway", format!("/v1/subscriptions?limit=100&cursor={cursor}"), Some(&key)),
        ("all subscriptions (admin), first page", "/admin/subscriptions?limit=100".into(), None),
        ("event log, first page of 100", "/v1/events?limit=100".into(), Some(&key)),
        (
            "event log, a page after the middle",
            format!(
                "/v1/events?limit=100&after={}",
                events as i64 / 2 + events_page["items"][0]["seq"].as_i64().unwrap_or(0)
            ),
            Some(&key),
        ),
        ("event log, search for a rare type", "/v1/events?limit=100&event_type=account.*".into(), Some(&key)),
        ("one event with its fan-out", format!("/v1/events/{rare_id}"), Some(&key)),
        ("event types", "/v1/event-types".into(), Some(&key)),
        ("a day of statistics", format!("/v1/subscriptions/{sub_id}/stats?window=24h"), Some(&key)),
    ];
    let mut rows = Vec::new();
    let mut figures = serde_json::Map::new();
    for (name, path, token) in &reads {
        let mut times = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let (status, answer, took) = hub.call(Method::GET, path, *token, None).await?;
            anyhow::ensure!(status == 200, "{name}: {status} {answer}");
            times.push(took.as_secs_f64() * 1000.0);
        }
        let (p50, p99) = quantiles(times);
        figures.insert((*name).to_owned(), json!({"p50_ms": p50, "p99_ms": p99}));
        rows.push((*name, format!("{} / {} ms", f1(p50), f1(p99))));
    }
    let hub = Arc::try_unwrap(hub).map_err(|_| anyhow::anyhow!("the hub is still shared"))?;
    let usage = hub.finish().await?;
    let store = if usage.postgres_cpu_s > 0.0 { "postgres" } else { "sqlite" };
    let mut all = json!({"scenario": "portal", "store": store, "subscriptions": subscriptions, "events": events,
                         "load_s": load_s});
    all["reads"] = Value::Object(figures);
    let mut table: Vec<(&str, String)> = vec![("loading: events/s", format!("{:.0}", events as f64 / load_s))];
    table.extend(rows.iter().map(|(n, v)| (*n, v.clone())));
    report(
        &format!(
            "portal ({store}: one tenant, {subscriptions} subscriptions, {events} events; p50 / p99 of {SAMPLES} reads)"
        ),
        &table,
        all,
        &usage,
        json_out,
    )
}

//! `crowd`: what the subscriptions an event does not match cost it. For each count, a fresh hub
//! whose one tenant holds that many subscriptions that never match the bench's events (a third
//! naming an exact type, a third a resource type and any event, a third an exact type with a
//! CESQL filter; all pull streams, so none is verified), and one webhook that takes every event;
//! then a burst to it. The cost of matching is the CPU an event costs (the hub's and
//! PostgreSQL's) beside the run with the fewest subscriptions: types index the subscriptions,
//! as Kafka-based routers do, so it should not grow with the ones that do not match.
//!
//! With `--per-tenant N` the bystanders belong to tenants of their own, `N` each (10 000 tenants
//! of 10 for a count of 100 000): an event is matched against its own tenant's subscriptions
//! only, so neither its cost nor the hub's memory should follow the other tenants'.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{BenchHub, Receiver, Usage, f0, f1, write_json};
use crate::scenarios::PATIENCE;

const TENANT: &str = "crowd";

struct Measured {
    subscriptions: usize,
    tenants: usize,
    create_s: f64,
    delivered_per_s: f64,
    hub_us: f64,
    postgres_us: f64,
    rss_mib: f64,
}

/// Subscription `i` that no bench event matches.
fn bystander(i: usize) -> serde_json::Value {
    let (types, filters) = match i % 3 {
        0 => (json!([format!("resource{i}.created")]), json!([])),
        1 => (json!([format!("resource{i}.*")]), json!([])),
        _ => (json!([format!("resource{i}.created")]), json!([{"sql": format!("subject = 'customer-{i}'")}])),
    };
    json!({"name": format!("bystander-{i}"), "event_types": types, "filters": filters, "sink": {"type": "pull"}})
}

pub async fn crowd(counts: &[usize], per_tenant: usize, events: usize, json_out: &Path) -> anyhow::Result<()> {
    let mut all = Vec::new();
    for &count in counts {
        all.push(measure(count, per_tenant, events).await?);
    }
    let whose = match per_tenant {
        0 => "of the same tenant".to_owned(),
        n => format!("of other tenants, {n} each"),
    };
    println!("crowd ({events} events to one webhook beside subscriptions {whose} that match none, one hub each)");
    println!(
        "  {:>13} {:>8} {:>12} {:>12} {:>22} {:>22} {:>9}",
        "subscriptions",
        "tenants",
        "create s",
        "delivered/s",
        "hub µs/event (beside)",
        "PG µs/event (beside)",
        "RSS MiB"
    );
    let first = &all[0];
    for m in &all {
        println!(
            "  {:>13} {:>8} {:>12} {:>12} {:>22} {:>22} {:>9}",
            m.subscriptions,
            m.tenants,
            f1(m.create_s),
            f0(m.delivered_per_s),
            format!("{:.0} ({:+.0})", m.hub_us, m.hub_us - first.hub_us),
            format!("{:.0} ({:+.0})", m.postgres_us, m.postgres_us - first.postgres_us),
            f1(m.rss_mib),
        );
    }
    let runs: Vec<_> = all
        .iter()
        .map(|m| {
            json!({"subscriptions": m.subscriptions, "tenants": m.tenants, "create_s": m.create_s, "delivered_per_s": m.delivered_per_s,
                "hub_cpu_us_per_event": m.hub_us, "postgres_cpu_us_per_event": m.postgres_us, "hub_peak_rss_mib": m.rss_mib})
        })
        .collect();
    write_json(&json!({"scenario": "crowd", "events": events, "per_tenant": per_tenant, "runs": runs}), json_out)
}

async fn measure(count: usize, per_tenant: usize, events: usize) -> anyhow::Result<Measured> {
    // Each owner may hold its share (the default quota is 500).
    let share = if per_tenant == 0 { count } else { per_tenant.min(count) };
    let quota = (share + 1).max(500).to_string();
    let hub = BenchHub::start_with(None, &[("STREAMING_HUB_MAX_SUBSCRIPTIONS_PER_TENANT", quota)]).await?;
    let receiver = Receiver::start().await?;
    let key = hub.tenant(TENANT).await?;
    let started = Instant::now();
    let tenants = if per_tenant == 0 { 1 } else { count.div_ceil(per_tenant) + 1 };
    let owners: Vec<String> = if per_tenant == 0 {
        vec![key.clone()]
    } else {
        let mut keys = Vec::with_capacity(tenants - 1);
        for t in 0..tenants - 1 {
            keys.push(hub.tenant(&format!("{TENANT}-{t}")).await?);
        }
        keys
    };
    let hub = Arc::new(hub);
    let mut made = tokio::task::JoinSet::new();
    let next = Arc::new(AtomicUsize::new(0));
    let owners = Arc::new(owners);
    // Several at once: a hundred thousand one after another would take most of the run.
    for _ in 0..16 {
        let (hub, next, owners) = (Arc::clone(&hub), Arc::clone(&next), Arc::clone(&owners));
        made.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return anyhow::Ok(());
                }
                let owner = if per_tenant == 0 { &owners[0] } else { &owners[i / per_tenant] };
                hub.subscribe_with(owner, bystander(i)).await?;
            }
        });
    }
    while let Some(done) = made.join_next().await {
        done??;
    }
    let hub = Arc::try_unwrap(hub).map_err(|_| anyhow::anyhow!("the hub is still shared"))?;
    let create_s = started.elapsed().as_secs_f64();
    hub.subscribe_with(
        &key,
        json!({"name": "taker", "event_types": ["payment.settled"], "sink": {"type": "webhook", "url": receiver.url(TENANT, false)}}),
    )
    .await?;
    let who = [(key, TENANT.to_owned())];
    // Warm up (connections, the tenant's subscriptions read), then forget it.
    hub.post_many(&who, 100, 4).await?;
    anyhow::ensure!(receiver.wait_for(TENANT, 100, PATIENCE).await, "the warm-up was not delivered");
    receiver.take(TENANT);

    let before = hub.usage();
    let posted = Instant::now();
    hub.post_many(&who, events, 16).await?;
    anyhow::ensure!(receiver.wait_for(TENANT, events, PATIENCE).await, "the burst was not delivered");
    let spent: Usage = hub.usage().since(&before);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let got = receiver.take(TENANT);
    let delivered_s = got.last_at.map_or(f64::NAN, |l| (l - posted).as_secs_f64());
    let (hub_ms, pg_ms) = spent.per_event_ms(got.distinct());
    let usage = hub.finish().await?;
    Ok(Measured {
        subscriptions: count,
        tenants,
        create_s,
        delivered_per_s: got.distinct() as f64 / delivered_s,
        hub_us: hub_ms * 1000.0,
        postgres_us: pg_ms * 1000.0,
        rss_mib: usage.hub_peak_rss_mib,
    })
}

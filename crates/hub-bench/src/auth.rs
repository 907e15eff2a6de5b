//! `auth-cost`: what authenticating to a receiver costs a delivery. The same events go to one
//! webhook five ways, a fresh hub each: signed only (HMAC, plain HTTP), with HTTP Basic, with an
//! OAuth2 bearer token from a token endpoint (in this process, counting its requests), over TLS
//! to a receiver of a private CA (`tls.ca_pem`), and over mutual TLS (`auth.mtls` as well). The
//! receiver answers at once, so what differs is the hub's own work.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::{Value, json};

use crate::fanout::wait;
use crate::harness::{BenchHub, Receiver, f0, f1, write_json};
use crate::scenarios::cpu_json;

/// A token endpoint that gives a token of `lifetime` seconds to anyone, counting the requests,
/// until `revoked` is set; then it answers `401 invalid_client`.
async fn token_endpoint(lifetime: u64) -> anyhow::Result<(String, Arc<AtomicUsize>, Arc<AtomicBool>)> {
    let asked = Arc::new(AtomicUsize::new(0));
    let revoked = Arc::new(AtomicBool::new(false));
    let (count, refuse) = (Arc::clone(&asked), Arc::clone(&revoked));
    let app = axum::Router::new().fallback(move || {
        let n = count.fetch_add(1, Ordering::SeqCst) + 1;
        let refused = refuse.load(Ordering::SeqCst);
        async move {
            if refused {
                return (axum::http::StatusCode::UNAUTHORIZED, axum::Json(json!({"error": "invalid_client"})));
            }
            let token =
                json!({"access_token": format!("bench-token-{n}"), "token_type": "Bearer", "expires_in": lifetime});
            (axum::http::StatusCode::OK, axum::Json(token))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/token", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, asked, revoked))
}

pub async fn auth_cost(events: usize, producers: usize, json_out: &Path) -> anyhow::Result<()> {
    let pki = hub_testkit::tls::Pki::new();
    let (token_url, asked, _) = token_endpoint(3600).await?;
    let mut rows = Vec::new();
    let mut figures = serde_json::Map::new();
    for mode in ["hmac", "basic", "oauth2", "tls", "mtls"] {
        let receiver = match mode {
            "tls" => Receiver::start_tls(&pki, false).await,
            "mtls" => Receiver::start_tls(&pki, true).await,
            _ => Receiver::start().await?,
        };
        let url = receiver.url_as("fast", mode);
        let mut sink = json!({"type": "webhook", "url": url});
        match mode {
            "basic" => sink["auth"] = json!({"type": "basic", "username": "bench", "password": "bench-password"}),
            "oauth2" => {
                sink["auth"] = json!({"type": "oauth2_client_credentials", "token_url": token_url,
                    "client_id": "bench", "client_secret": "bench-secret"});
            }
            "tls" => sink["tls"] = json!({"ca_pem": pki.ca_pem}),
            "mtls" => {
                sink["tls"] = json!({"ca_pem": pki.ca_pem});
                sink["auth"] = json!({"type": "mtls", "certificate_pem": pki.client_pem,
                    "private_key_pem": pki.client_key_pem});
            }
            _ => {}
        }
        let hub = BenchHub::start(None).await?;
        let key = hub.tenant(mode).await?;
        hub.subscribe_with(&key, json!({"name": mode, "event_types": ["*.*"], "sink": sink})).await?;
        let who = [(key, mode.to_owned())];
        // Warm up (the connection, the token), then forget it.
        hub.post_many(&who, 1, 1).await?;
        wait(&|| receiver.delivered(mode), 1).await?;
        receiver.take(mode);
        let tokens_before = asked.load(Ordering::SeqCst);

        let before = hub.usage();
        let started = Instant::now();
        hub.post_many(&who, events, producers).await?;
        wait(&|| receiver.delivered(mode), events).await?;
        let spent = hub.usage().since(&before);
        let got = receiver.received(mode);
        let usage = hub.finish().await?;
        let per_s = got.distinct() as f64 / got.last_at.map_or(f64::NAN, |l| (l - started).as_secs_f64());
        let latency = got.latency();
        let cpu = cpu_json(&spent, got.distinct());
        let tokens = asked.load(Ordering::SeqCst) - tokens_before;
        rows.push((mode, per_s, latency, cpu.clone(), tokens, usage.hub_peak_rss_mib));
        figures.insert(
            mode.to_owned(),
            json!({"delivered_per_s": per_s, "e2e_latency_ms": latency.json(), "cpu_ms_per_delivery": cpu,
                "token_requests": tokens, "deliveries": got.distinct(), "duplicates": got.duplicates(),
                "hub_peak_rss_mib": usage.hub_peak_rss_mib}),
        );
    }
    // A client secret revoked once the subscription is verified (its tokens last 61 s, used for
    // one): however many attempts wait, the token endpoint is asked once per pause (10 s).
    let (wrong_url, wrong_asked, revoke) = token_endpoint(61).await?;
    let hub = BenchHub::start(None).await?;
    let key = hub.tenant("wrong").await?;
    let receiver = Receiver::start().await?;
    let sink = json!({"type": "webhook", "url": receiver.url_as("fast", "wrong"), "auth": {"type": "oauth2_client_credentials",
        "token_url": wrong_url, "client_id": "bench", "client_secret": "bench-secret"}});
    hub.subscribe_with(&key, json!({"name": "wrong", "event_types": ["*.*"], "sink": sink})).await?;
    revoke.store(true, Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let asked_before = wrong_asked.load(Ordering::SeqCst);
    let watched = std::time::Duration::from_secs(30);
    let started = Instant::now();
    hub.post_many(&[(key, "wrong".to_owned())], events.min(1000), producers).await?;
    tokio::time::sleep(watched.saturating_sub(started.elapsed())).await;
    let metrics = hub.metrics().await?;
    let attempts =
        crate::harness::metric_sum(&metrics, "streaming_hub_delivery_attempts_total", &["sink=\"webhook\"".to_owned()]);
    let wrong_tokens = wrong_asked.load(Ordering::SeqCst) - asked_before;
    hub.finish().await?;
    figures.insert(
        "oauth2_wrong_secret".to_owned(),
        json!({"seconds": watched.as_secs(), "attempts": attempts, "token_requests": wrong_tokens,
            "delivered": receiver.delivered("wrong")}),
    );

    println!("auth-cost ({events} events of ~1 KiB to one webhook at once, a fresh hub each way)");
    println!(
        "  {:<8} {:>12} {:>16} {:>22} {:>8} {:>9}",
        "way", "delivered/s", "p50 / p99 ms", "CPU ms (hub + PG)", "tokens", "RSS MiB"
    );
    let hmac = rows[0].3["hub"].as_f64().unwrap_or(f64::NAN);
    for (mode, per_s, latency, cpu, tokens, rss) in &rows {
        let hub_ms = cpu["hub"].as_f64().unwrap_or(f64::NAN);
        println!(
            "  {:<8} {:>12} {:>16} {:>22} {:>8} {:>9}",
            mode,
            f0(*per_s),
            format!("{} / {}", f1(latency.p50), f1(latency.p99)),
            format!("{hub_ms:.3} ({:+.3}) + {:.3}", hub_ms - hmac, cpu["postgres"].as_f64().unwrap_or(f64::NAN)),
            tokens,
            f1(*rss),
        );
    }
    println!(
        "  a wrong client secret, {} s: {attempts} attempts failed, {wrong_tokens} token requests",
        watched.as_secs()
    );
    let mut figures = Value::Object(figures);
    figures["scenario"] = json!("auth-cost");
    figures["events"] = json!(events);
    write_json(&figures, json_out)
}

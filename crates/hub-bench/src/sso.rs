//! `hub-bench sso-cost`: what a person's JWT costs a request beside an API key. A provider runs in
//! this process (its discovery document and an ES256 key set over HTTP), the hub trusts it, and
//! the same read (`GET /v1/subscriptions`) is made many times with a tenant's API key, with one
//! person's token (verified once, then remembered), and with a fresh token each time (a signature
//! checked every request). The hub's CPU a request is the figure.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

use crate::harness::{BenchHub, write_json};

const AUDIENCE: &str = "streaming-hub";

struct Provider {
    issuer: String,
    pair: EcdsaKeyPair,
}

impl Provider {
    fn token(&self, subject: &str) -> String {
        let now = chrono::Utc::now().timestamp();
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": "bench"});
        let claims = json!({"iss": self.issuer, "sub": subject, "aud": AUDIENCE, "iat": now, "exp": now + 3600,
            "roles": ["bench:viewer"]});
        let input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let signature = self.pair.sign(&SystemRandom::new(), input.as_bytes()).expect("sign");
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }
}

async fn provider() -> anyhow::Result<Arc<Provider>> {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
        .map_err(|_| anyhow::anyhow!("cannot make a key"))?;
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
        .map_err(|_| anyhow::anyhow!("cannot read the key"))?;
    let point = pair.public_key().as_ref().to_vec();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let issuer = format!("http://{}", listener.local_addr()?);
    let discovery = json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")});
    let jwks = json!({"keys": [{"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": "bench",
        "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..65])}]});
    let app = axum::Router::new()
        .route("/.well-known/openid-configuration", axum::routing::get(move || async move { axum::Json(discovery) }))
        .route("/jwks", axum::routing::get(move || async move { axum::Json(jwks) }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(Arc::new(Provider { issuer, pair }))
}

/// Makes `tokens.len()` reads, 16 at a time, each with its token; the hub's CPU they took, in µs a
/// request.
async fn reads(hub: &BenchHub, tokens: Vec<String>) -> anyhow::Result<(f64, f64)> {
    let n = tokens.len();
    let queue = Arc::new(std::sync::Mutex::new(tokens));
    let before = hub.usage();
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..16 {
        let (queue, http, url) = (Arc::clone(&queue), hub.http.clone(), format!("{}/v1/subscriptions", hub.base));
        workers.push(tokio::spawn(async move {
            loop {
                let Some(token) = queue.lock().expect("queue").pop() else { return Ok::<_, anyhow::Error>(()) };
                let response = http.get(&url).bearer_auth(token).send().await?;
                let status = response.status();
                anyhow::ensure!(status.is_success(), "a read answered {status}: {}", response.text().await?);
            }
        }));
    }
    for w in workers {
        w.await??;
    }
    let took = started.elapsed().as_secs_f64();
    let spent = hub.usage().since(&before);
    Ok((spent.hub_cpu_s * 1e6 / n as f64, n as f64 / took))
}

pub async fn sso_cost(requests: usize, json_out: &Path) -> anyhow::Result<()> {
    let idp = provider().await?;
    let hub = BenchHub::start_with(
        None,
        &[
            ("STREAMING_HUB_SSO_ISSUERS", idp.issuer.clone()),
            ("STREAMING_HUB_SSO_AUDIENCE", AUDIENCE.to_owned()),
            ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
        ],
    )
    .await?;
    let key = hub.tenant("bench").await?;
    let person = idp.token("ana");
    // Warm up: the connections, the provider's keys, the key's and the token's first checks.
    reads(&hub, vec![key.clone(); 200]).await?;
    reads(&hub, vec![person.clone(); 200]).await?;
    let fresh: Vec<String> = (0..requests).map(|i| idp.token(&format!("p{i}"))).collect();

    let mut rows: Vec<(&str, f64, f64)> = Vec::new();
    for round in 0..2 {
        let (key_us, key_rate) = reads(&hub, vec![key.clone(); requests]).await?;
        let (cached_us, cached_rate) = reads(&hub, vec![person.clone(); requests]).await?;
        if round == 1 {
            rows.push(("API key", key_us, key_rate));
            rows.push(("JWT, verified before", cached_us, cached_rate));
        }
    }
    let (fresh_us, fresh_rate) = reads(&hub, fresh).await?;
    rows.push(("JWT, a new one each", fresh_us, fresh_rate));
    hub.finish().await?;

    println!("sso-cost ({requests} reads of GET /v1/subscriptions each way, 16 at a time; ES256 tokens)");
    println!("  {:<22} {:>18} {:>14} {:>12}", "credential", "hub CPU µs/request", "beside the key", "requests/s");
    let base = rows[0].1;
    let mut figures = serde_json::Map::new();
    for (way, us, rate) in &rows {
        println!("  {:<22} {:>18.1} {:>+14.1} {:>12.0}", way, us, us - base, rate);
        figures.insert(
            (*way).to_owned(),
            json!({"hub_cpu_us_per_request": us, "beside_key_us": us - base, "requests_per_s": rate}),
        );
    }
    write_json(&Value::Object(figures), json_out)
}

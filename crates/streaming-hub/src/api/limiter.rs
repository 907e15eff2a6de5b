//! Per-tenant rate limits (pull reads, HTTP ingest): a token bucket per tenant, per process.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hub_core::TenantId;
use hub_core::ratelimit::TokenBucket;

/// Per-tenant token buckets (pull reads, HTTP ingest), per process.
#[derive(Debug)]
pub struct TenantLimiter {
    rate: u32,
    burst: u32,
    origin: Instant,
    buckets: Mutex<HashMap<TenantId, TokenBucket>>,
}

/// Buckets kept before full (idle) ones are forgotten.
const MAX_IDLE_BUCKETS: usize = 10_000;

impl TenantLimiter {
    pub fn new(rate: u32, burst: u32) -> Self {
        Self { rate, burst, origin: Instant::now(), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes a token for `tenant`, or says how long to wait.
    pub fn check(&self, tenant: &TenantId) -> Result<(), Duration> {
        let now = self.origin.elapsed();
        let mut buckets = self.buckets.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if buckets.len() > MAX_IDLE_BUCKETS {
            buckets.retain(|_, b| !b.is_full(now));
        }
        buckets.entry(tenant.clone()).or_insert_with(|| TokenBucket::new(self.rate, self.burst, now)).try_take(now)
    }
}

/// The `429 rate_limited` answer, with `Retry-After` in whole seconds (at least one).
pub fn rate_limited(wait: Duration, message: impl Into<String>) -> super::error::ApiError {
    let mut err = super::error::ApiError::new(axum::http::StatusCode::TOO_MANY_REQUESTS, "rate_limited", message);
    err.retry_after = Some(wait.as_secs_f64().ceil().max(1.0) as u64);
    err
}

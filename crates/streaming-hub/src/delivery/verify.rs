//! Verifying a destination (SPEC §2.2): probe it with the stored secrets, then record the
//! result. Success activates the subscription and re-enables it in place, clearing the failure
//! period and the disabled reason — this is how an auto-disabled subscription is recovered.

use std::time::Duration;

use hub_store::{Store, StoreError, SubscriptionRecord, VerificationResult};

use hub_sinks::{Probed, Sink};

use super::targets;
use crate::clock::Clock;
use crate::secrets::Sealer;

/// How long a probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// Probes the subscription's destination; `Err` carries the reason shown to the tenant, which
/// never tells a destination that does not resolve, refuses connections or is not allowed from
/// another (the cause is logged, and counted in `streaming_hub_verification_failures_total`).
pub async fn probe(
    sub: &SubscriptionRecord,
    sinks: &dyn Sink,
    sealer: &Sealer,
    clock: &dyn Clock,
) -> Result<Probed, String> {
    let destination = targets::destination(sub)?;
    let secrets = targets::secrets(sub, sealer, clock.now())?;
    sinks.probe(&destination, &secrets, &sub.tenant_id, sub.id, PROBE_TIMEOUT).await.map_err(|f| {
        let kind = crate::telemetry::failure_kind(f.kind, f.status);
        metrics::counter!(crate::telemetry::metric::VERIFICATION_FAILURES, "sink" => hub_sinks::registry::name(sub.sink), "kind" => kind)
            .increment(1);
        tracing::warn!(
            tenant = %sub.tenant_id, subscription = %sub.id, kind, status = ?f.status, cause = %f.reason,
            "destination probe failed"
        );
        f.tenant_reason().to_owned()
    })
}

/// Probes and stores the result; returns the subscription as stored after it and the failure,
/// if any. The result is recorded only if the destination is still the one probed: a PATCH that
/// changed it meanwhile wins, and the new destination gets its own probe.
pub async fn verify(
    probed: SubscriptionRecord,
    store: &dyn Store,
    sinks: &dyn Sink,
    sealer: &Sealer,
    clock: &dyn Clock,
    reenable: bool,
    notices: &crate::operational::Notices,
) -> Result<(SubscriptionRecord, Option<String>), StoreError> {
    let (allowed_rate, error) = match probe(&probed, sinks, sealer, clock).await {
        Ok(p) => (p.allowed_rate, None),
        Err(e) => (None, Some(e)),
    };
    let mut result = VerificationResult {
        allowed_rate,
        probed_config: probed.sink_config.clone(),
        probed_credentials: probed.credentials.clone(),
        error: error.clone(),
        reenable,
        now: clock.now(),
    };
    // A PATCH that changed only what the probe did not test (a timeout, a header) meanwhile does
    // not void the result: it is recorded against the destination as it is now.
    let mut stored = None;
    for _ in 0..3 {
        if let Some(sub) = store.set_verification(&probed.tenant_id, probed.id, &result).await? {
            stored = Some(sub);
            break;
        }
        match store.subscription(&probed.tenant_id, probed.id).await? {
            Some(now)
                if now.credentials == probed.credentials
                    && hub_sinks::destination::request::same_connection(&probed.sink_config, &now.sink_config) =>
            {
                result.probed_config = now.sink_config;
            }
            current => return Ok((current.unwrap_or(probed), error)),
        }
    }
    let Some(sub) = stored else {
        return Ok((probed, error));
    };
    use hub_core::operational::Kind;
    let notice = match &error {
        None => {
            tracing::info!(tenant = %sub.tenant_id, subscription = %sub.id, "destination verified");
            (Kind::VerificationSucceeded, serde_json::json!({}))
        }
        Some(reason) => {
            tracing::warn!(tenant = %sub.tenant_id, subscription = %sub.id, reason = %reason, "destination verification failed");
            (Kind::VerificationFailed, serde_json::json!({ "error": reason }))
        }
    };
    notices.emit(crate::operational::Notice::new(&sub.tenant_id, sub.id, notice.0, notice.1));
    Ok((sub, error))
}

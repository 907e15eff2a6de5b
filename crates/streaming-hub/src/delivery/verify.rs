//! Verifying a destination (SPEC §2.2): probe it with the stored secrets, then record the
//! result. Success activates the subscription and re-enables it in place, clearing the failure
//! period and the disabled reason — this is how an auto-disabled subscription is recovered.

use std::time::Duration;

use hub_core::{SinkKind, VerificationState};
use hub_sinks::Sink;
use hub_store::{Store, StoreError, SubscriptionRecord};

use super::{Sinks, targets};
use crate::clock::Clock;
use crate::secrets::Sealer;

/// Probes the subscription's destination; `Err` carries the reason shown to the tenant.
pub async fn probe(sub: &SubscriptionRecord, sinks: &Sinks, sealer: &Sealer, clock: &dyn Clock) -> Result<(), String> {
    match sub.sink {
        SinkKind::Pull => Ok(()),
        SinkKind::Webhook => {
            let target = targets::webhook_target(sub, sealer, clock.now(), Duration::from_secs(60))?;
            sinks.webhook.probe(&target, &sub.tenant_id, sub.id).await.map_err(|f| f.reason)
        }
        SinkKind::Sqs => {
            let target = targets::sqs_target(sub, sealer, Duration::from_secs(60), sinks.aws_endpoint_url.as_deref())?;
            sinks.sqs.probe(&target, &sub.tenant_id, sub.id).await.map_err(|f| f.reason)
        }
        SinkKind::Eventbridge => {
            let target =
                targets::eventbridge_target(sub, sealer, Duration::from_secs(60), sinks.aws_endpoint_url.as_deref())?;
            sinks.eventbridge.probe(&target, &sub.tenant_id, sub.id).await.map_err(|f| f.reason)
        }
        SinkKind::Rabbitmq => {
            let target = targets::rabbitmq_target(sub, sealer, Duration::from_secs(60))?;
            sinks.rabbitmq.probe(&target, &sub.tenant_id, sub.id).await.map_err(|f| f.reason)
        }
    }
}

/// Probes and stores the result; returns the updated subscription and the failure, if any. The
/// result is applied to the subscription as stored after the probe, and dropped if its
/// destination changed meanwhile (that destination was not the one probed).
pub async fn verify(
    probed: SubscriptionRecord,
    store: &dyn Store,
    sinks: &Sinks,
    sealer: &Sealer,
    clock: &dyn Clock,
    reenable: bool,
) -> Result<(SubscriptionRecord, Option<String>), StoreError> {
    let result = probe(&probed, sinks, sealer, clock).await;
    let Some(mut sub) = store.subscription(&probed.tenant_id, probed.id).await? else {
        return Ok((probed, result.err()));
    };
    if sub.sink_config != probed.sink_config || sub.credentials != probed.credentials {
        return Ok((sub, result.err()));
    }
    sub.updated_at = clock.now();
    let failure = match result {
        Ok(()) => {
            sub.verification = VerificationState::Active;
            sub.verification_error = None;
            if reenable {
                sub.enabled = true;
                sub.disabled_reason = None;
                sub.failing_since = None;
                sub.last_failure_at = None;
            }
            None
        }
        Err(reason) => {
            sub.verification = VerificationState::Failed;
            sub.verification_error = Some(reason.clone());
            Some(reason)
        }
    };
    store.update_subscription(&sub).await?;
    tracing::info!(
        tenant = %sub.tenant_id,
        subscription = %sub.id,
        state = %sub.verification,
        "destination verification"
    );
    Ok((sub, failure))
}

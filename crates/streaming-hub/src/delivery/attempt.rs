//! One attempt of a claimed job: its span, the sink call with the opened secrets, and the
//! outcome settled into the job's transition (or a release when it cannot be attempted now).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hub_core::delivery::{AttemptFacts, AutoDisable, JobTransition, OutcomeClass, Permit, settle};
use hub_core::operational::Kind as OperationalKind;
use hub_sinks::{Failure, FailureKind, Message, Outcome};
use hub_store::{AttemptRecord, AttemptResult, ClaimedJob, StoredEvent};
use rand::Rng;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tracing::Instrument;
use uuid::Uuid;

use super::targets::Subscribed;
use super::{Attempted, Dispatcher, Skip, Work, lock, targets};
use crate::operational::Notice;
use crate::telemetry::metric;

use hub_core::delivery::inflight::Signal;

use super::capacity::Admit;
use super::transform;

impl Dispatcher {
    pub(super) async fn release(&self, job: &ClaimedJob, due_at: DateTime<Utc>) {
        if let Err(e) = self.store.release_job(job.id, job.token, due_at).await {
            tracing::warn!(job = %job.id, error = %e, "releasing a job failed; its lease will expire");
        }
    }

    /// One claimed job: exactly one attempt, its outcome handed to the recorder; or a release
    /// without an attempt.
    pub(super) async fn attempt(
        self: Arc<Self>,
        work: Work,
        sub: Arc<Subscribed>,
        _slot: OwnedSemaphorePermit,
        recorder: mpsc::Sender<AttemptResult>,
        finished: mpsc::UnboundedSender<String>,
    ) {
        let Work { job, event, .. } = work;
        let attempt = (job.attempts + 1).max(1) as u32;
        let span = tracing::info_span!(
            "attempt",
            tenant = %job.tenant_id,
            subscription = %job.subscription_id,
            job = %job.id,
            attempt,
            sink = sub.record.sink.as_str(),
        );
        // The trace's `job` span continues the event's trace (`crate::trace`).
        let traced = crate::trace_span!(
            "job",
            tenant = %job.tenant_id,
            subscription = %job.subscription_id,
            job = %job.id,
            attempt,
            sink = sub.record.sink.as_str(),
        );
        if let Some(e) = event.as_deref().filter(|_| crate::trace::on()) {
            crate::trace::continue_from(
                &traced,
                &[
                    crate::trace::remote(e.trace.as_deref(), None),
                    crate::trace::remote(e.traceparent.as_deref(), e.tracestate.as_deref()),
                ],
            );
        }
        // What was taken for this attempt is given back by this guard on every path: its end,
        // a panic anywhere below, or the task being dropped.
        let mut flying =
            Flying { dispatcher: &self, job: &job, sub: &sub, finished: &finished, felt: None, recorded: false };
        let (recorded, felt) =
            self.attempt_in_span(&job, &sub, event.as_deref(), &sub.key, attempt, &traced).instrument(span).await;
        drop(traced);
        flying.felt = felt;
        flying.recorded = recorded.is_some();
        drop(flying);
        if let Some(result) = recorded
            && recorder.send(result).await.is_err()
        {
            tracing::error!(job = %job.id, "the recorder stopped; the lease will expire");
        }
    }

    pub(super) async fn skip(&self, job: &ClaimedJob, why: Skip) {
        let due = match why {
            // Another worker will free a slot soon; try again shortly.
            Skip::DestinationBusy => self.clock.now() + chrono::Duration::milliseconds(50),
            Skip::BreakerOpen(until) | Skip::Paused(until) => until,
        };
        self.release(job, due).await;
    }

    /// Makes the attempt and decides its outcome; `None` when the job was put back without one.
    /// Beside it, what the outcome tells the destination's allowance, and a `Retry-After`.
    pub(super) async fn attempt_in_span(
        &self,
        job: &ClaimedJob,
        sub: &Subscribed,
        event: Option<&StoredEvent>,
        dest: &str,
        attempt: u32,
        traced: &tracing::Span,
    ) -> (Option<AttemptResult>, Option<(Signal, Option<Duration>)>) {
        let started = self.clock.now();
        let last = self.settings.retry.is_last(attempt, job.window_start, started);
        match self.breaker_permit(job, dest, started, last) {
            Permit::Wait { until } => {
                self.skip(job, Skip::BreakerOpen(until)).await;
                return (None, None);
            }
            Permit::Attempt | Permit::Probe => {}
        }
        let delivery_id = Uuid::now_v7();
        let clock_start = Instant::now();
        // A panic is the hub's failure, not the destination's: it moves no breaker or allowance.
        let mut panicked = false;
        // The ledger's digest of what was sent (SPEC §11), under a key of this attempt's own.
        let digest_key: [u8; 16] = rand::rng().random();
        let mut sent_digest = None;
        let outcome = match event {
            // Erased: the tombstone is never sent in its place, and the job ends cancelled, no
            // failure of the destination's.
            Some(StoredEvent { erasure_id: Some(erasure), .. }) => {
                Outcome::Cancelled(format!("erased: the event was erased (erasure {erasure})"))
            }
            Some(event) => {
                let span = if crate::trace::on() {
                    tracing::info_span!(
                        target: "streaming_hub::trace",
                        parent: traced,
                        "attempt",
                        otel.kind = "producer",
                        delivery = %delivery_id,
                        outcome = tracing::field::Empty,
                        failure = tracing::field::Empty,
                        http.response.status_code = tracing::field::Empty,
                        otel.status_code = tracing::field::Empty,
                    )
                } else {
                    tracing::Span::none()
                };
                // A panic in a sink or in what it reads from a third party fails this attempt
                // (retried on the curve), never the dispatcher (SPEC §11).
                let delivered =
                    std::panic::AssertUnwindSafe(self.deliver(sub, event, attempt, delivery_id, started, &digest_key));
                let outcome = match futures_util::FutureExt::catch_unwind(delivered).await {
                    Ok((outcome, digest)) => {
                        sent_digest = digest;
                        outcome
                    }
                    Err(_) => {
                        panicked = true;
                        metrics::counter!(metric::ATTEMPT_PANICS).increment(1);
                        tracing::error!(job = %job.id, "the attempt failed unexpectedly (a panic); recorded as a failure and retried");
                        Outcome::Failed(Failure {
                            retryable: true,
                            kind: FailureKind::Refused,
                            reason: "the hub failed unexpectedly while attempting this delivery; it will be retried"
                                .to_owned(),
                            status: None,
                            response: None,
                            retry_after: None,
                        })
                    }
                };
                crate::trace::attempted(&span, &outcome);
                outcome
            }
            None => Outcome::Failed(Failure {
                retryable: false,
                kind: FailureKind::Refused,
                reason: "the event is no longer stored".to_owned(),
                status: None,
                response: None,
                retry_after: None,
            }),
        };
        let latency = clock_start.elapsed();
        let now = self.clock.now();
        // What the destination's allowance and breaker learn: nothing from an attempt that never
        // reached it (its transform skipped the event or failed).
        let felt = match &outcome {
            _ if panicked => None,
            // A 2xx head whose body stalled holds its slot the whole timeout: felt as one.
            Outcome::Delivered { stalled: true, .. } => Some((Signal::Overload, None)),
            Outcome::Delivered { .. } => Some((Signal::Success(latency), None)),
            Outcome::Failed(f) if f.kind == FailureKind::Transform => None,
            Outcome::Failed(f) => {
                Some((Signal::of(false, latency, f.status, f.kind == FailureKind::Timeout), f.retry_after))
            }
            Outcome::Skipped | Outcome::Cancelled(_) => None,
        };
        if felt.is_some() {
            self.breaker_outcome(job, dest, outcome.is_delivered(), now);
        } else {
            self.breaker_untried(job, dest, now);
        }
        let attempted = Attempted { job, sub: &sub.record, number: attempt, delivery_id, started, latency, now };
        let mut result = self.record(&attempted, outcome);
        result.ledger = Some(ledger_entry(&result, event, dest, sent_digest, digest_key));
        if sub.record.ordering == hub_core::Ordering::Key && !matches!(result.transition, JobTransition::Retry { .. }) {
            lock(&self.frees_key).insert(job.id);
        }
        if let JobTransition::Dead { reason, .. } = &result.transition {
            // Not for an operational event's own job: failing subscriptions would tell each
            // other about each other without end.
            if event.is_none_or(|e| hub_core::operational::announces_dead_letter(&e.resource_type)) {
                let mut data = serde_json::json!({
                    "job_id": job.id,
                    "event_id": event.map(|e| e.ce_id),
                    "event_type": event.map(StoredEvent::event_key),
                    "attempts": attempt,
                    "reason": reason,
                });
                // With ordering by key, the dead letter released its key: say which moved on.
                if sub.record.ordering == hub_core::Ordering::Key
                    && let Some(key) = event.and_then(|e| hub_core::routing::ordering_key(e))
                {
                    data["ordering_key"] = serde_json::Value::String(key);
                }
                lock(&self.dead_letters).insert(
                    job.id,
                    Notice::new(&job.tenant_id, job.subscription_id, OperationalKind::JobDeadLettered, data),
                );
            }
        }
        (Some(result), felt)
    }

    /// The attempt, and the digest of what was sent under `digest_key` (none when nothing was).
    pub(super) async fn deliver(
        &self,
        subscribed: &Subscribed,
        event: &StoredEvent,
        attempt: u32,
        delivery_id: Uuid,
        now: DateTime<Utc>,
        digest_key: &[u8],
    ) -> (Outcome, Option<String>) {
        let sub = &subscribed.record;
        let shaped: transform::Shaped;
        let ordering_key = match sub.ordering {
            hub_core::Ordering::Key => hub_core::routing::ordering_key(event),
            hub_core::Ordering::None => None,
        };
        let sent = hub_sinks::message::Sent::default();
        let mut message = targets::message(event, sub, ordering_key.as_deref(), attempt, delivery_id);
        message.sent = Some(&sent);
        // The attempt must end well inside the lease, or another worker could take the job.
        let max_timeout = self.settings.lease.mul_f64(0.8);
        let destination = match &subscribed.destination {
            Ok(destination) => destination,
            Err(reason) => return (config_failure(reason.clone()), None),
        };
        if let Some(code) = &subscribed.transform {
            match self.transformed(code, destination, event, &message).await {
                Ok(Some(s)) => {
                    shaped = s;
                    message.payload = &shaped.body;
                    message.headers = &shaped.headers;
                    message.path = &shaped.path;
                    message.content_type = &shaped.content_type;
                }
                Ok(None) => return (Outcome::Skipped, None),
                Err(failure) => return (Outcome::Failed(failure), None),
            }
        }
        let outcome = match targets::secrets(sub, &self.sealer, now) {
            Ok(secrets) => self.sinks.deliver(destination, &secrets, &message, max_timeout).await,
            Err(reason) => return (config_failure(reason), None),
        };
        // Sent, whether or not it was taken; a failure before anything left is not digested.
        let reached = !matches!(&outcome, Outcome::Failed(f) if matches!(f.kind, FailureKind::Unreachable | FailureKind::Forbidden));
        let digest =
            reached.then(|| hub_core::ledger::entry::sent_digest(digest_key, &sent.headers(), message.payload));
        (outcome, digest)
    }

    /// What the subscription's transform makes of the message: `None` when it skips the event.
    /// Runs on the transform pool; what the sink would send is what the handler is shown.
    async fn transformed(
        &self,
        code: &Result<hub_transform::Code, String>,
        destination: &hub_sinks::Destination,
        event: &StoredEvent,
        message: &Message<'_>,
    ) -> Result<Option<transform::Shaped>, Failure> {
        let (code, pool) = match (code, &self.transforms) {
            (Ok(code), Some(pool)) => (code, pool),
            (Err(reason), _) => return Err(transform_failure(reason.clone(), &[])),
            (_, None) => return Err(transform_failure("transformations do not run in this process".into(), &[])),
        };
        let shown = self.sinks.headers(destination, message);
        let given = transform::Given::stored(event, &shown);
        let run = pool.run(&event.tenant_id, code.clone(), transform::input_given(event, &given)).await;
        metrics::histogram!(metric::TRANSFORM_SECONDS).record(run.duration.as_secs_f64());
        let result = match run.output {
            Ok(hub_transform::Output::Skip) => Ok(None),
            Ok(hub_transform::Output::Event(answer)) => transform::shape(&answer, &given).map(Some),
            Err(failure) => Err(failure.to_string()),
        };
        let label = match &result {
            Ok(Some(_)) => "transformed",
            Ok(None) => "skipped",
            Err(_) => "failed",
        };
        metrics::counter!(metric::TRANSFORM_RUNS, "result" => label).increment(1);
        result.map_err(|reason| transform_failure(reason, &run.logs))
    }

    /// The attempt's record and its settlement (`hub_core::delivery::settle`): what it does to the
    /// job and to the subscription.
    pub(super) fn record(&self, attempt: &Attempted, outcome: Outcome) -> AttemptResult {
        let Attempted { job, sub, number, delivery_id, started, latency, now } = attempt;
        let sink = hub_sinks::registry::name(sub.sink);
        metrics::histogram!(metric::ATTEMPT_SECONDS, "sink" => sink).record(latency.as_secs_f64());
        let facts = AttemptFacts {
            attempt: *number,
            window_start: job.window_start,
            started: *started,
            now: *now,
            failing_since: sub.failing_since,
        };
        let auto_disable = self.settings.auto_disable.map(|(window, spread)| AutoDisable { window, spread });
        let (class, status, error, response) = match &outcome {
            Outcome::Skipped => {
                metrics::counter!(metric::DELIVERY_ATTEMPTS, "sink" => sink, "outcome" => "skipped").increment(1);
                tracing::debug!(delivery = %delivery_id, "skipped by the transform");
                (OutcomeClass::Skipped, None, None, None)
            }
            Outcome::Cancelled(reason) => {
                metrics::counter!(metric::DELIVERY_ATTEMPTS, "sink" => sink, "outcome" => "cancelled").increment(1);
                (OutcomeClass::Cancelled { reason }, None, Some(reason.clone()), None)
            }
            Outcome::Delivered { status, response, .. } => {
                metrics::counter!(metric::DELIVERY_ATTEMPTS, "sink" => sink, "outcome" => "delivered").increment(1);
                tracing::debug!(delivery = %delivery_id, status = ?status, "delivered");
                (OutcomeClass::Delivered, *status, None, response.clone())
            }
            Outcome::Failed(f) => {
                metrics::counter!(metric::DELIVERY_ATTEMPTS, "sink" => sink, "outcome" => "failed").increment(1);
                let kind = crate::telemetry::failure_kind(f.kind, f.status);
                metrics::counter!(metric::DELIVERY_FAILURES, "sink" => sink, "kind" => kind).increment(1);
                // A transform's reason is what the tenant's code threw, which may quote the event:
                // the log (which erasure cannot reach) gets its kind only; the attempt keeps it.
                let reason = if f.kind == FailureKind::Transform {
                    "(the transform's, kept with the attempt)"
                } else {
                    &f.reason
                };
                tracing::warn!(delivery = %delivery_id, kind = f.kind.as_str(), status = ?f.status, reason = %reason, retryable = f.retryable, "delivery attempt failed");
                // What the tenant reads (attempts, dead letters) never tells unreachable from
                // refused by the guard; the log line above and the metric keep the cause.
                let (reason, standing) = (f.tenant_reason(), f.standing_reason());
                let class = if f.retryable {
                    OutcomeClass::Retryable { reason, standing }
                } else {
                    OutcomeClass::Permanent { reason, standing }
                };
                (class, f.status, Some(format!("{}: {}", f.tenant_kind(), f.tenant_reason())), f.response.clone())
            }
        };
        let settlement = settle(&facts, class, &self.settings.retry, auto_disable, rand::rng().random());
        if matches!(settlement.transition, JobTransition::Dead { .. }) {
            metrics::counter!(metric::JOBS_DEAD, "sink" => sink).increment(1);
        }
        AttemptResult {
            token: job.token,
            record: AttemptRecord {
                id: *delivery_id,
                job_id: job.id,
                tenant_id: job.tenant_id.clone(),
                subscription_id: job.subscription_id,
                attempt: *number as i32,
                started_at: *started,
                latency_ms: latency.as_millis() as i64,
                outcome: match outcome {
                    Outcome::Delivered { .. } => "delivered",
                    Outcome::Failed(_) => "failed",
                    Outcome::Skipped => "skipped",
                    Outcome::Cancelled(_) => "cancelled",
                }
                .to_owned(),
                status_code: status.map(i32::from),
                error,
                response_body: response,
                ledger_index: None,
            },
            transition: settlement.transition,
            health: settlement.health,
            now: *now,
            ledger: None,
        }
    }
}

pub(super) fn config_failure(reason: String) -> Outcome {
    Outcome::Failed(Failure {
        retryable: true,
        kind: FailureKind::Refused,
        reason,
        status: None,
        response: None,
        retry_after: None,
    })
}

/// An attempt its transform failed: retried like any failure; the lines the handler logged are
/// kept with the attempt in place of a destination's answer (there was none), at most
/// [`hub_sinks::RESPONSE_CAP`] bytes.
fn transform_failure(reason: String, logs: &[String]) -> Failure {
    let logs = logs.join("\n");
    Failure {
        retryable: true,
        kind: FailureKind::Transform,
        reason,
        status: None,
        response: (!logs.is_empty()).then(|| hub_sinks::cap_text(logs.as_bytes(), hub_sinks::RESPONSE_CAP)),
        retry_after: None,
    }
}

/// An attempt's hold on its slot: its ledger entry, the in-flight gauge, its parked neighbours'
/// wake-up, and its job's place among the jobs in flight. Dropped on every path (a panic
/// included), it gives all of them back.
struct Flying<'a> {
    dispatcher: &'a Dispatcher,
    job: &'a ClaimedJob,
    sub: &'a Subscribed,
    finished: &'a mpsc::UnboundedSender<String>,
    /// What the outcome taught the destination (nothing when it never got one).
    felt: Option<(Signal, Option<Duration>)>,
    /// Whether an outcome goes to the recorder (which then forgets the job once recorded).
    recorded: bool,
}

impl Drop for Flying<'_> {
    fn drop(&mut self) {
        let (signal, pause) = self.felt.map_or((None, None), |(s, p)| (Some(s), p));
        let d = self.dispatcher;
        let cut = d.flights.lock().leave(&Admit::of(self.job, self.sub), signal, pause, std::time::Instant::now());
        metrics::gauge!(metric::IN_FLIGHT).decrement(1.0);
        if cut {
            metrics::counter!(metric::ALLOWANCE_CUTS).increment(1);
        }
        if pause.is_some() {
            metrics::counter!(metric::DESTINATION_PAUSES).increment(1);
        }
        // A job parked for this destination may go now.
        let _ = self.finished.send(self.sub.key.clone());
        if !self.recorded {
            lock(&d.in_flight).remove(&self.job.id);
        }
    }
}

/// The ledger entry of a recorded attempt (SPEC §11): what happened, the destination's digest
/// and the keyed digest of what was sent; the key stays beside the entry, outside the log.
fn ledger_entry(
    result: &AttemptResult,
    event: Option<&StoredEvent>,
    dest: &str,
    sent: Option<String>,
    digest_key: [u8; 16],
) -> hub_store::NewLedgerEntry {
    let a = &result.record;
    let job = match &result.transition {
        JobTransition::Succeeded => "succeeded",
        JobTransition::Retry { .. } => "retry",
        JobTransition::Dead { .. } => "dead",
        JobTransition::Cancelled { .. } => "cancelled",
    };
    let event_id = event.map(|e| e.ce_id);
    let entry = hub_core::ledger::entry::Delivery::new(
        a.started_at,
        a.id,
        event_id,
        a.subscription_id,
        a.job_id,
        a.attempt.max(0) as u32,
        dest,
        sent.clone(),
        a.status_code.and_then(|s| u16::try_from(s).ok()),
        a.latency_ms.max(0) as u64,
        &a.outcome,
        job,
    );
    hub_store::NewLedgerEntry {
        log: a.tenant_id.clone(),
        at: result.now,
        kind: "delivery",
        data: entry.text(),
        event_id,
        digest_key: sent.map(|_| digest_key.to_vec()),
    }
}

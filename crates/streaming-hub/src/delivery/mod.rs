//! The dispatcher: a pool of workers making push deliveries (SPEC §3).
//!
//! One loop claims due jobs in small batches with a lease (the store interleaves tenants) and
//! hands each to a worker, which makes exactly one attempt and records it. Decisions — retry
//! delay, last attempt, dead letter, breaker, auto-disable — come from `hub-core`; the worker
//! only carries them out. New jobs wake the loop at once (in-process, and PostgreSQL `NOTIFY`
//! from other replicas); the idle interval is only a fallback. Expired leases (a worker that
//! died) are recovered, and poison jobs dead-lettered, by the same loop.
//!
//! **Invariants:** a destination never holds more than half the workers; a job is attempted only
//! while leased by this worker; an open breaker holds jobs back without spending their attempts,
//! except a job's last attempt.

pub mod targets;
pub mod verify;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hub_core::SinkKind;
use hub_core::delivery::{AfterFailure, Breaker, BreakerConfig, Permit, RetryPolicy, Transition, should_auto_disable};
use hub_sinks::{EventBridgeSink, Failure, FailureKind, Message, Outcome, RabbitSink, Sink, SqsSink, WebhookSink};
use hub_store::{
    AttemptRecord, AttemptResult, ClaimRequest, ClaimedJob, HealthUpdate, JobTransition, Store, StoredEvent,
    SubscriptionRecord,
};
use rand::Rng;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::clock::Clock;
use crate::secrets::Sealer;
use crate::telemetry::metric;

/// How the dispatcher runs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub workers: u32,
    pub claim_batch: u32,
    pub idle_interval: Duration,
    pub lease: Duration,
    pub poison_threshold: u32,
    pub retry: RetryPolicy,
    pub breaker: BreakerConfig,
    /// `(window, spread)` when auto-disable is on.
    pub auto_disable: Option<(Duration, Duration)>,
}

impl Settings {
    /// At most half the workers (and at least one) per destination.
    pub fn per_destination_cap(&self) -> usize {
        (self.workers as usize / 2).max(1)
    }
}

/// The sinks a dispatcher delivers with (shared: each pools its connections).
#[derive(Debug, Clone)]
pub struct Sinks {
    pub webhook: WebhookSink,
    pub sqs: Arc<SqsSink>,
    pub eventbridge: Arc<EventBridgeSink>,
    pub rabbitmq: Arc<RabbitSink>,
    /// Used by SQS and EventBridge subscriptions that name no endpoint.
    pub aws_endpoint_url: Option<String>,
}

impl Sinks {
    pub fn new(
        allow_private: bool,
        aws_default_credentials: bool,
        aws_endpoint_url: Option<String>,
    ) -> Result<Self, String> {
        Ok(Self {
            aws_endpoint_url,
            webhook: WebhookSink::new(allow_private)?,
            sqs: Arc::new(SqsSink::new(aws_default_credentials)),
            eventbridge: Arc::new(EventBridgeSink::new(aws_default_credentials)),
            rabbitmq: Arc::new(RabbitSink::new()),
        })
    }
}

#[derive(Debug, Default)]
struct Destinations {
    in_flight: HashMap<String, usize>,
    of_subscription: HashMap<Uuid, String>,
}

/// The push delivery engine of one process.
#[derive(Debug)]
pub struct Dispatcher {
    store: Arc<dyn Store>,
    sealer: Arc<Sealer>,
    sinks: Sinks,
    clock: Arc<dyn Clock>,
    wake: Arc<Notify>,
    settings: Settings,
    breakers: Mutex<HashMap<(String, String), Breaker>>,
    destinations: Mutex<Destinations>,
    /// Jobs being attempted now, with their lease tokens.
    in_flight: Mutex<HashMap<Uuid, Uuid>>,
}

/// Why a job is put back without an attempt.
enum Skip {
    DestinationBusy,
    BreakerOpen(DateTime<Utc>),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Dispatcher {
    pub fn new(
        store: Arc<dyn Store>,
        sealer: Arc<Sealer>,
        sinks: Sinks,
        clock: Arc<dyn Clock>,
        wake: Arc<Notify>,
        settings: Settings,
    ) -> Self {
        Self {
            store,
            sealer,
            sinks,
            clock,
            wake,
            settings,
            breakers: Mutex::new(HashMap::new()),
            destinations: Mutex::new(Destinations::default()),
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// Runs until `shutdown`, then waits (up to `drain`) for attempts in flight.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken, drain: Duration) {
        let workers = Arc::new(Semaphore::new(self.settings.workers as usize));
        let mut after_tenant: Option<String> = None;
        let mut last_recovery: Option<Instant> = None;
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            if last_recovery.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                self.recover().await;
                last_recovery = Some(Instant::now());
            }
            let free = workers.available_permits() as u32;
            if free == 0 {
                tokio::select! {
                    permit = Arc::clone(&workers).acquire_owned() => drop(permit),
                    () = shutdown.cancelled() => break,
                }
                continue;
            }
            let now = self.clock.now();
            let request = ClaimRequest {
                now,
                lease_until: now + chrono::Duration::from_std(self.settings.lease).unwrap_or(chrono::Duration::MAX),
                token: Uuid::now_v7(),
                limit: free.min(self.settings.claim_batch),
                after_tenant: after_tenant.clone(),
                exclude_subscriptions: self.saturated_subscriptions(),
            };
            match self.store.claim_jobs(&request).await {
                Ok(jobs) if jobs.is_empty() => {
                    tokio::select! {
                        () = self.wake.notified() => {}
                        () = tokio::time::sleep(self.settings.idle_interval) => {}
                        () = shutdown.cancelled() => break,
                    }
                }
                Ok(jobs) => {
                    after_tenant = jobs.last().map(|j| j.tenant_id.clone());
                    for job in jobs {
                        let Ok(permit) = Arc::clone(&workers).acquire_owned().await else { break };
                        tokio::spawn(Arc::clone(&self).attempt(job, permit));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "claiming jobs failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(self.settings.idle_interval.max(Duration::from_millis(500))) => {}
                        () = shutdown.cancelled() => break,
                    }
                }
            }
        }
        // Drain: in-flight attempts finish (and record) within the shutdown timeout; the leases of
        // those that do not are released, so another replica takes the jobs at once.
        let all = self.settings.workers;
        if tokio::time::timeout(drain, workers.acquire_many(all)).await.is_err() {
            let unfinished: Vec<(Uuid, Uuid)> = lock(&self.in_flight).iter().map(|(j, t)| (*j, *t)).collect();
            tracing::warn!(jobs = unfinished.len(), "shutdown timeout reached; releasing unfinished leases");
            for (job, token) in unfinished {
                if let Err(e) = self.store.release_job(job, token, self.clock.now()).await {
                    tracing::warn!(job = %job, error = %e, "releasing a lease failed; it will expire");
                }
            }
        }
    }

    async fn recover(&self) {
        match self.store.recover_expired_leases(self.clock.now(), self.settings.poison_threshold).await {
            Ok(r) if r.recovered + r.poisoned > 0 => {
                tracing::warn!(recovered = r.recovered, poisoned = r.poisoned, "expired leases taken back");
                metrics::counter!(metric::LEASES_RECOVERED).increment(r.recovered);
                metrics::counter!(metric::JOBS_POISONED).increment(r.poisoned);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "recovering expired leases failed"),
        }
    }

    fn saturated_subscriptions(&self) -> Vec<Uuid> {
        let cap = self.settings.per_destination_cap();
        let d = lock(&self.destinations);
        d.of_subscription
            .iter()
            .filter(|(_, dest)| d.in_flight.get(*dest).copied().unwrap_or(0) >= cap)
            .map(|(sub, _)| *sub)
            .collect()
    }

    /// Takes a worker slot on the destination, unless it already has its share.
    fn enter(&self, sub: Uuid, dest: &str) -> bool {
        let cap = self.settings.per_destination_cap();
        let mut d = lock(&self.destinations);
        d.of_subscription.insert(sub, dest.to_owned());
        let n = d.in_flight.entry(dest.to_owned()).or_insert(0);
        if *n >= cap {
            return false;
        }
        *n += 1;
        true
    }

    fn leave(&self, dest: &str) {
        let mut d = lock(&self.destinations);
        if let Some(n) = d.in_flight.get_mut(dest) {
            *n = n.saturating_sub(1);
        }
    }

    fn breaker_permit(&self, tenant: &str, dest: &str, now: DateTime<Utc>, last: bool) -> Permit {
        let mut breakers = lock(&self.breakers);
        let breaker =
            breakers.entry((tenant.to_owned(), dest.to_owned())).or_insert_with(|| Breaker::new(self.settings.breaker));
        let (permit, transition) = breaker.permit(now, last);
        count_transition(transition);
        permit
    }

    fn breaker_outcome(&self, tenant: &str, dest: &str, delivered: bool, now: DateTime<Utc>) {
        let mut breakers = lock(&self.breakers);
        if let Some(breaker) = breakers.get_mut(&(tenant.to_owned(), dest.to_owned())) {
            let transition = if delivered { breaker.on_success() } else { breaker.on_failure(now) };
            count_transition(transition);
            if breaker.is_closed() && delivered {
                // A healthy destination needs no entry.
                breakers.remove(&(tenant.to_owned(), dest.to_owned()));
            }
        }
    }

    async fn release(&self, job: &ClaimedJob, due_at: DateTime<Utc>) {
        if let Err(e) = self.store.release_job(job.id, job.token, due_at).await {
            tracing::warn!(job = %job.id, error = %e, "releasing a job failed; its lease will expire");
        }
    }

    /// One claimed job: exactly one attempt, or a release without one.
    async fn attempt(self: Arc<Self>, job: ClaimedJob, _worker: OwnedSemaphorePermit) {
        lock(&self.in_flight).insert(job.id, job.token);
        Arc::clone(&self).attempt_claimed(&job).await;
        lock(&self.in_flight).remove(&job.id);
    }

    async fn attempt_claimed(self: Arc<Self>, job: &ClaimedJob) {
        let job = job.clone();
        let sub = match self.store.subscription(&job.tenant_id, job.subscription_id).await {
            Ok(Some(sub)) => sub,
            // Deleted meanwhile: its jobs were cancelled, this lease is moot.
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(job = %job.id, error = %e, "loading the subscription failed");
                return self.release(&job, self.clock.now()).await;
            }
        };
        let dest = targets::destination_key(&sub);
        if !self.enter(sub.id, &dest) {
            return self.skip(&job, Skip::DestinationBusy).await;
        }
        self.attempt_on(&job, &sub, &dest).await;
        self.leave(&dest);
        // A slot freed: claim again without waiting for the idle interval.
        self.wake.notify_one();
    }

    async fn skip(&self, job: &ClaimedJob, why: Skip) {
        let due = match why {
            // Another worker will free a slot soon; try again shortly.
            Skip::DestinationBusy => self.clock.now() + chrono::Duration::milliseconds(50),
            Skip::BreakerOpen(until) => until,
        };
        self.release(job, due).await;
    }

    async fn attempt_on(&self, job: &ClaimedJob, sub: &SubscriptionRecord, dest: &str) {
        let attempt = (job.attempts + 1).max(1) as u32;
        let span = tracing::info_span!(
            "attempt",
            tenant = %job.tenant_id,
            subscription = %job.subscription_id,
            job = %job.id,
            attempt,
            sink = sub.sink.as_str(),
        );
        self.attempt_in_span(job, sub, dest, attempt).instrument(span).await;
    }

    async fn attempt_in_span(&self, job: &ClaimedJob, sub: &SubscriptionRecord, dest: &str, attempt: u32) {
        let started = self.clock.now();
        let last = self.settings.retry.is_last(attempt, job.window_start, started);
        match self.breaker_permit(&job.tenant_id, dest, started, last) {
            Permit::Wait { until } => return self.skip(job, Skip::BreakerOpen(until)).await,
            Permit::Attempt | Permit::Probe => {}
        }
        let delivery_id = Uuid::now_v7();
        let clock_start = Instant::now();
        let outcome = match self.store.event_by_seq(&job.tenant_id, job.event_seq).await {
            Ok(Some(event)) => self.deliver(sub, &event, attempt, delivery_id, started).await,
            Ok(None) => Outcome::Failed(Failure {
                retryable: false,
                kind: FailureKind::Refused,
                reason: "the event is no longer stored".to_owned(),
                status: None,
                response: None,
            }),
            Err(e) => {
                tracing::warn!(job = %job.id, error = %e, "loading the event failed");
                return self.release(job, self.clock.now()).await;
            }
        };
        let latency = clock_start.elapsed();
        let now = self.clock.now();
        self.breaker_outcome(&job.tenant_id, dest, outcome.is_delivered(), now);
        self.record(job, sub, attempt, delivery_id, started, latency, outcome, now).await;
    }

    async fn deliver(
        &self,
        sub: &SubscriptionRecord,
        event: &StoredEvent,
        attempt: u32,
        delivery_id: Uuid,
        now: DateTime<Utc>,
    ) -> Outcome {
        let content_type = event.data_content_type.as_deref().unwrap_or("application/json");
        let message = Message {
            tenant: &event.tenant_id,
            subscription_id: sub.id,
            ce_id: event.ce_id,
            source: &event.source,
            ce_type: &event.ce_type,
            resource_type: &event.resource_type,
            event_type: &event.event_type,
            time: &event.event_time,
            schema_version: &event.schema_version,
            subject: event.subject.as_deref(),
            content_type,
            data_schema: event.data_schema.as_deref(),
            traceparent: event.traceparent.as_deref(),
            tracestate: event.tracestate.as_deref(),
            extensions: &event.extensions,
            payload: &event.payload,
            attempt,
            delivery_id,
        };
        // The attempt must end well inside the lease, or another worker could take the job.
        let max_timeout = self.settings.lease.mul_f64(0.8);
        let outcome = match sub.sink {
            SinkKind::Webhook => match targets::webhook_target(sub, &self.sealer, now, max_timeout) {
                Ok(target) => Ok(self.sinks.webhook.deliver(&target, &message).await),
                Err(reason) => Err(reason),
            },
            SinkKind::Sqs => {
                match targets::sqs_target(sub, &self.sealer, max_timeout, self.sinks.aws_endpoint_url.as_deref()) {
                    Ok(target) => Ok(self.sinks.sqs.deliver(&target, &message).await),
                    Err(reason) => Err(reason),
                }
            }
            SinkKind::Eventbridge => match targets::eventbridge_target(
                sub,
                &self.sealer,
                max_timeout,
                self.sinks.aws_endpoint_url.as_deref(),
            ) {
                Ok(target) => Ok(self.sinks.eventbridge.deliver(&target, &message).await),
                Err(reason) => Err(reason),
            },
            SinkKind::Rabbitmq => match targets::rabbitmq_target(sub, &self.sealer, max_timeout) {
                Ok(target) => Ok(self.sinks.rabbitmq.deliver(&target, &message).await),
                Err(reason) => Err(reason),
            },
            SinkKind::Pull => Err("a pull subscription has no push destination".to_owned()),
        };
        outcome.unwrap_or_else(config_failure)
    }

    #[allow(clippy::too_many_arguments)]
    async fn record(
        &self,
        job: &ClaimedJob,
        sub: &SubscriptionRecord,
        attempt: u32,
        delivery_id: Uuid,
        started: DateTime<Utc>,
        latency: Duration,
        outcome: Outcome,
        now: DateTime<Utc>,
    ) {
        let sink = sub.sink.as_str();
        metrics::histogram!(metric::ATTEMPT_SECONDS, "sink" => sink).record(latency.as_secs_f64());
        let (record_outcome, status, error, response, transition, health) = match outcome {
            Outcome::Delivered { status, response } => {
                metrics::counter!(metric::DELIVERY_ATTEMPTS, "sink" => sink, "outcome" => "delivered").increment(1);
                tracing::debug!(delivery = %delivery_id, status = ?status, "delivered");
                ("delivered", status, None, response, JobTransition::Succeeded, HealthUpdate::Success)
            }
            Outcome::Failed(f) => {
                metrics::counter!(metric::DELIVERY_ATTEMPTS, "sink" => sink, "outcome" => "failed").increment(1);
                tracing::warn!(delivery = %delivery_id, kind = f.kind.as_str(), status = ?f.status, reason = %f.reason, "delivery attempt failed");
                let unit: f64 = rand::rng().random();
                let transition = match self.settings.retry.after_failure(attempt, job.window_start, started, now, unit)
                {
                    AfterFailure::Retry { due_at } => JobTransition::Retry { due_at },
                    AfterFailure::DeadLetter(why) => {
                        metrics::counter!(metric::JOBS_DEAD, "sink" => sink).increment(1);
                        JobTransition::Dead { reason: format!("{}: last error: {}", why.as_str(), f.reason) }
                    }
                };
                let disable = self.settings.auto_disable.and_then(|(window, spread)| {
                    let first = sub.failing_since.unwrap_or(now);
                    should_auto_disable(first, now, now, window, spread).then(|| {
                        format!(
                            "auto-disabled: deliveries failing continuously since {} (last error: {})",
                            first.to_rfc3339(),
                            f.reason
                        )
                    })
                });
                let kind = f.kind.as_str();
                (
                    "failed",
                    f.status,
                    Some(format!("{kind}: {}", f.reason)),
                    f.response,
                    transition,
                    HealthUpdate::Failure { at: now, disable },
                )
            }
        };
        let result = AttemptResult {
            token: job.token,
            record: AttemptRecord {
                id: delivery_id,
                job_id: job.id,
                tenant_id: job.tenant_id.clone(),
                subscription_id: job.subscription_id,
                attempt: attempt as i32,
                started_at: started,
                latency_ms: latency.as_millis() as i64,
                outcome: record_outcome.to_owned(),
                status_code: status.map(i32::from),
                error,
                response_body: response,
            },
            transition,
            health,
            now,
        };
        match self.store.complete_attempt(&result).await {
            Ok(done) => {
                if done.disabled {
                    metrics::counter!(metric::AUTO_DISABLED).increment(1);
                    tracing::warn!(tenant = %job.tenant_id, subscription = %sub.id, "subscription auto-disabled");
                }
                if !done.job_updated {
                    tracing::warn!(job = %job.id, "the lease was lost during the attempt; the attempt is recorded");
                }
            }
            Err(e) => tracing::error!(job = %job.id, error = %e, "recording an attempt failed; the lease will expire"),
        }
    }
}

fn config_failure(reason: String) -> Outcome {
    Outcome::Failed(Failure { retryable: true, kind: FailureKind::Refused, reason, status: None, response: None })
}

fn count_transition(t: Option<Transition>) {
    let Some(t) = t else { return };
    let to = match t {
        Transition::Opened => "open",
        Transition::HalfOpened => "half_open",
        Transition::Closed => "closed",
    };
    metrics::counter!(metric::BREAKER_TRANSITIONS, "to" => to).increment(1);
}

/// The settings a configuration asks for.
pub fn settings(config: &crate::config::Config) -> Settings {
    Settings {
        workers: config.dispatch_workers,
        claim_batch: config.dispatch_claim_batch,
        idle_interval: config.dispatch_idle_interval,
        lease: config.dispatch_lease,
        poison_threshold: config.poison_threshold,
        retry: RetryPolicy { curve: config.retry_curve.clone(), deadline: config.retry_deadline },
        breaker: BreakerConfig {
            failure_threshold: config.breaker_failures,
            cooldown: config.breaker_cooldown,
            max_cooldown: config.breaker_max_cooldown,
        },
        auto_disable: config
            .autodisable_enabled
            .then_some((config.autodisable_failure_window, config.autodisable_failure_spread)),
    }
}

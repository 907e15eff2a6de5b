//! Circuit breakers per destination as the dispatcher keeps them: permits, outcomes, the board
//! the API reads, metrics and the operational events of their transitions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use hub_core::delivery::{Breaker, Permit, Transition};
use hub_core::operational::Kind as OperationalKind;
use hub_store::ClaimedJob;
use uuid::Uuid;

use super::{Dispatcher, lock};
use crate::operational::Notice;
use crate::telemetry::metric;

/// The breakers of this process that are not closed, by the subscription whose job last moved
/// each: what listings show. Breakers are per destination; a subscription sharing one shows it
/// once its own jobs meet it.
#[derive(Debug, Clone, Default)]
pub struct BreakerBoard(Arc<Mutex<HashMap<Uuid, &'static str>>>);

impl BreakerBoard {
    /// `closed`, `open` or `half_open`.
    pub fn state(&self, subscription: Uuid) -> &'static str {
        lock(&self.0).get(&subscription).copied().unwrap_or("closed")
    }

    /// Every subscription whose breaker is not closed, with its state.
    pub(super) fn not_closed(&self) -> Vec<(Uuid, &'static str)> {
        lock(&self.0).iter().map(|(id, s)| (*id, *s)).collect()
    }

    pub(super) fn moved(&self, subscription: Uuid, transition: Transition) {
        let mut board = lock(&self.0);
        match transition {
            Transition::Opened => board.insert(subscription, "open"),
            Transition::HalfOpened => board.insert(subscription, "half_open"),
            Transition::Closed => board.remove(&subscription),
        };
    }
}

impl Dispatcher {
    pub(super) fn breaker_permit(&self, job: &ClaimedJob, dest: &str, now: DateTime<Utc>, last: bool) -> Permit {
        let mut breakers = lock(&self.breakers);
        let breaker = breakers
            .entry((job.tenant_id.clone(), dest.to_owned()))
            .or_insert_with(|| Breaker::new(self.settings.breaker));
        let (permit, transition) = breaker.permit(now, last);
        count_transition(transition);
        self.breaker_notice(job, transition);
        if transition.is_some() {
            breaker_gauges(&breakers);
        }
        permit
    }

    /// `breaker_opened` and `breaker_closed`, about the subscription whose attempt moved it.
    pub(super) fn breaker_notice(&self, job: &ClaimedJob, transition: Option<Transition>) {
        if let Some(t) = transition {
            self.board.moved(job.subscription_id, t);
        }
        let kind = match transition {
            Some(Transition::Opened) => OperationalKind::BreakerOpened,
            Some(Transition::Closed) => OperationalKind::BreakerClosed,
            _ => return,
        };
        self.notices.emit(Notice::new(&job.tenant_id, job.subscription_id, kind, serde_json::json!({})));
    }

    /// An attempt that never reached its destination (see `Breaker::on_untried`).
    pub(super) fn breaker_untried(&self, job: &ClaimedJob, dest: &str, now: DateTime<Utc>) {
        let mut breakers = lock(&self.breakers);
        if let Some(breaker) = breakers.get_mut(&(job.tenant_id.clone(), dest.to_owned())) {
            breaker.on_untried(now);
        }
    }

    pub(super) fn breaker_outcome(&self, job: &ClaimedJob, dest: &str, delivered: bool, now: DateTime<Utc>) {
        let tenant = job.tenant_id.as_str();
        let mut breakers = lock(&self.breakers);
        if let Some(breaker) = breakers.get_mut(&(tenant.to_owned(), dest.to_owned())) {
            let transition = if delivered { breaker.on_success() } else { breaker.on_failure(now) };
            count_transition(transition);
            self.breaker_notice(job, transition);
            if breaker.is_closed() && delivered {
                // A healthy destination needs no entry.
                breakers.remove(&(tenant.to_owned(), dest.to_owned()));
            }
            if transition.is_some() {
                breaker_gauges(&breakers);
            }
        }
    }
}

/// `streaming_hub_breakers{state}` from the breakers of this process.
pub(super) fn breaker_gauges(breakers: &HashMap<(String, String), Breaker>) {
    let open = breakers.values().filter(|b| b.is_open()).count();
    let half_open = breakers.values().filter(|b| b.is_half_open()).count();
    metrics::gauge!(metric::BREAKERS, "state" => "open").set(open as f64);
    metrics::gauge!(metric::BREAKERS, "state" => "half_open").set(half_open as f64);
}

pub(super) fn count_transition(t: Option<Transition>) {
    let Some(t) = t else { return };
    let to = match t {
        Transition::Opened => "open",
        Transition::HalfOpened => "half_open",
        Transition::Closed => "closed",
    };
    metrics::counter!(metric::BREAKER_TRANSITIONS, "to" => to).increment(1);
}

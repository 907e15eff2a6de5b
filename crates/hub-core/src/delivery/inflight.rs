//! Attempts in flight (SPEC §10): how many attempts a destination may have out at once, how fast a
//! subscription may be sent to, and the limits a subscription's owner sets.
//!
//! - [`Limits`]: a subscription's fixed limits (`limits.max_in_flight`, `limits.per_second`), read
//!   from the API's JSON with errors that name the field.
//! - [`Allowance`]: a destination's adaptive allowance of attempts in flight. It grows quickly
//!   while attempts succeed at a steady latency (a slow start, one more per success, so it doubles
//!   every round trip), is cut by half on an overload signal (`429`, `503`, a timeout) at most
//!   once per round trip, and after a cut regrows by one per round trip (AIMD, as TCP does). An
//!   overload signal also brings it down to what was still out beside the refused attempt, so a
//!   refusal that comes back at once never makes room for the next. It
//!   grows only while the destination uses at least half of it, so a lightly loaded destination
//!   does not earn an allowance it never tested.
//! - [`Pace`]: a rate as a generic cell (GCRA): no faster than the rate over any window, with a
//!   burst of at most a hundredth of a second's worth (at least one).
//! - [`tenant_may_start`]: a tenant's share of the replica's slots while other tenants wait.
//! - [`helper_share`]: when the replica that paces a hot destination lets the others attempt it
//!   too, and how many at once each.
//!
//! The clock is an input: every function that needs the time takes `now`.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The allowance a destination starts with: enough for a healthy slow receiver to be measured
/// at once, few enough that a receiver which hangs holds few slots.
pub const INITIAL_ALLOWANCE: f64 = 8.0;

/// The most a `Retry-After` may pause a destination for; a longer one is cut to this.
pub const MAX_PAUSE: Duration = Duration::from_secs(3600);

/// A subscription's fixed delivery limits (both optional: `None` is no fixed limit).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Limits {
    /// Attempts in flight at once for this subscription, per replica.
    #[serde(default)]
    pub max_in_flight: Option<u32>,
    /// Attempts started per second for this subscription, per replica.
    #[serde(default)]
    pub per_second: Option<f64>,
}

/// A refused `limits` object: the field (`limits.max_in_flight`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct LimitsError {
    pub field: String,
    pub message: String,
}

impl Limits {
    /// The largest `max_in_flight` a subscription may ask for.
    pub const MAX_IN_FLIGHT: u32 = 2048;
    /// The slowest rate a subscription may ask for (attempts per second).
    pub const MIN_PER_SECOND: f64 = 0.01;
    /// The fastest rate a subscription may ask for.
    pub const MAX_PER_SECOND: f64 = 10_000.0;

    /// Reads the API's `limits` object (`null` is no limits); every error names its field.
    pub fn parse(value: &serde_json::Value) -> Result<Self, LimitsError> {
        let refuse =
            |field: &str, message: &str| LimitsError { field: format!("limits{field}"), message: message.into() };
        let object = match value {
            serde_json::Value::Null => return Ok(Self::default()),
            serde_json::Value::Object(o) => o,
            _ => return Err(refuse("", "must be an object with max_in_flight and/or per_second, or null")),
        };
        let mut limits = Self::default();
        for (key, v) in object {
            match key.as_str() {
                "max_in_flight" => {
                    limits.max_in_flight = match v {
                        serde_json::Value::Null => None,
                        v => match v.as_u64() {
                            Some(n) if (1..=u64::from(Self::MAX_IN_FLIGHT)).contains(&n) => Some(n as u32),
                            _ => {
                                return Err(refuse(
                                    ".max_in_flight",
                                    &format!("must be a whole number from 1 to {}, or null", Self::MAX_IN_FLIGHT),
                                ));
                            }
                        },
                    }
                }
                "per_second" => {
                    limits.per_second = match v {
                        serde_json::Value::Null => None,
                        v => match v.as_f64() {
                            Some(r) if (Self::MIN_PER_SECOND..=Self::MAX_PER_SECOND).contains(&r) => Some(r),
                            _ => {
                                return Err(refuse(
                                    ".per_second",
                                    &format!(
                                        "must be a number from {} to {}, or null",
                                        Self::MIN_PER_SECOND,
                                        Self::MAX_PER_SECOND
                                    ),
                                ));
                            }
                        },
                    }
                }
                other => {
                    let shown: String = other.chars().take(64).collect();
                    return Err(LimitsError {
                        field: "limits".into(),
                        message: format!("unknown field {shown:?}: only max_in_flight and per_second are accepted"),
                    });
                }
            }
        }
        Ok(limits)
    }

    /// The JSON the API answers: both fields, `null` when unset.
    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({ "max_in_flight": self.max_in_flight, "per_second": self.per_second })
    }

    /// The rate that applies, in attempts per second: this subscription's own and the one its
    /// receiver declared at verification (`WebHook-Allowed-Rate`, requests per minute), the lower.
    pub fn rate(self, declared_per_minute: Option<f64>) -> Option<f64> {
        let declared = declared_per_minute.filter(|r| r.is_finite() && *r > 0.0).map(|r| r / 60.0);
        match (self.per_second, declared) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Reads a `WebHook-Allowed-Rate` header value: a positive number of requests per minute
/// (the CloudEvents HTTP webhook specification), or `*` (no limit); anything else is ignored.
pub fn parse_allowed_rate(raw: &str) -> Option<f64> {
    let raw = raw.trim();
    if raw.len() > 32 {
        return None;
    }
    raw.parse::<f64>().ok().filter(|r| r.is_finite() && *r > 0.0).map(|r| r.min(Limits::MAX_PER_SECOND * 60.0))
}

/// What an attempt's outcome tells the allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Delivered, in this long.
    Success(Duration),
    /// The destination is overloaded: `429`, `503`, or no answer in time.
    Overload,
    /// Any other failure: says nothing about load.
    Other,
}

impl Signal {
    /// Which signal an attempt gives: `status` when the destination answered, `timed_out` when it
    /// did not answer in time.
    pub fn of(delivered: bool, latency: Duration, status: Option<u16>, timed_out: bool) -> Self {
        if delivered {
            Self::Success(latency)
        } else if timed_out || matches!(status, Some(429 | 503)) {
            Self::Overload
        } else {
            Self::Other
        }
    }
}

/// A destination's adaptive allowance of attempts in flight (see the module's rules).
#[derive(Debug, Clone)]
pub struct Allowance {
    limit: f64,
    /// Below it the allowance grows by one per success (slow start); at or above, by one per
    /// round trip.
    threshold: f64,
    /// The steady latency: the least seen, drifting slowly up to what attempts take now.
    baseline: Option<Duration>,
    last_cut: Option<Instant>,
    ceiling: f64,
}

impl Allowance {
    /// A new allowance, never above `ceiling` (the replica's bound, or a subscription's own).
    pub fn new(ceiling: usize) -> Self {
        let ceiling = ceiling.max(1) as f64;
        Self { limit: INITIAL_ALLOWANCE.min(ceiling), threshold: ceiling, baseline: None, last_cut: None, ceiling }
    }

    /// Attempts that may be in flight now (at least one).
    pub fn current(&self) -> usize {
        self.limit.floor().max(1.0) as usize
    }

    /// The steady latency measured so far.
    pub fn baseline(&self) -> Option<Duration> {
        self.baseline
    }

    /// Whether the allowance is still in its slow start.
    pub fn slow_start(&self) -> bool {
        self.limit < self.threshold
    }

    /// Takes one attempt's outcome; `in_flight` is how many attempts the destination had out
    /// when this one ended (itself included). Answers whether the allowance was cut.
    pub fn on(&mut self, signal: Signal, in_flight: usize, now: Instant) -> bool {
        match signal {
            Signal::Success(latency) => {
                self.on_success(latency, in_flight);
                false
            }
            Signal::Overload => self.on_overload(in_flight, now),
            Signal::Other => false,
        }
    }

    fn on_success(&mut self, latency: Duration, in_flight: usize) {
        let baseline = match self.baseline {
            None => latency,
            Some(b) if latency < b => latency,
            // Drifts up slowly, so a receiver whose normal latency grows is not taken for
            // overloaded for ever.
            Some(b) => b + (latency - b) / 64,
        };
        self.baseline = Some(baseline);
        let steady = latency <= baseline * 2 + Duration::from_millis(5);
        let used = in_flight as f64 * 2.0 >= self.limit;
        if !steady || !used {
            return;
        }
        self.limit += if self.slow_start() { 1.0 } else { 1.0 / self.limit };
        self.limit = self.limit.min(self.ceiling);
    }

    fn on_overload(&mut self, in_flight: usize, now: Instant) -> bool {
        // The destination refused while the others were out: it takes no more than those now,
        // so a refusal that comes back at once does not make room for the next one.
        let out = (in_flight.saturating_sub(1) as f64).max(1.0);
        if out < self.limit {
            self.limit = out;
            self.threshold = self.threshold.min(out);
        }
        // Attempts that were out together fail together: one cut per round trip.
        let round_trip = self.baseline.unwrap_or_default().max(Duration::from_millis(100));
        if self.last_cut.is_some_and(|at| now.saturating_duration_since(at) < round_trip) {
            return false;
        }
        self.last_cut = Some(now);
        self.limit = (self.limit / 2.0).max(1.0);
        self.threshold = self.limit;
        true
    }

    /// Whether the allowance has gone [`CALM_FOR`] without a cut.
    pub fn calm(&self, now: Instant) -> bool {
        self.last_cut.is_none_or(|at| now.saturating_duration_since(at) >= CALM_FOR)
    }

    /// A new ceiling (the subscription's own changed); the allowance is cut to it if above.
    pub fn set_ceiling(&mut self, ceiling: usize) {
        self.ceiling = ceiling.max(1) as f64;
        self.limit = self.limit.min(self.ceiling);
        self.threshold = self.threshold.min(self.ceiling);
    }
}

/// How long a destination's allowance must go without a cut before it is shared.
pub const CALM_FOR: Duration = Duration::from_secs(30);
/// The allowance from which a destination that uses it is hot enough to share.
pub const HOT_ALLOWANCE: usize = 64;

/// What the replica that paces a destination knows of it, to decide whether to share it.
#[derive(Debug, Clone, Copy)]
pub struct ShareFacts {
    pub allowance: usize,
    /// Whether the allowance went [`CALM_FOR`] without a cut ([`Allowance::calm`]).
    pub calm: bool,
    pub in_flight: usize,
    /// The subscription has `limits` or its receiver declared a rate: a promise only one pacer
    /// keeps.
    pub limited: bool,
    pub paused: bool,
    pub breaker_closed: bool,
    /// Live delivering replicas, this one included.
    pub replicas: usize,
}

/// How many attempts each other replica may have out at once at a hot destination its pacer
/// shares (`None`: not shared). Only a destination that promised nothing (no limits, no declared
/// rate), answers well (no pause, breaker closed, no cut of its allowance for [`CALM_FOR`]) and
/// uses most of a large allowance ([`HOT_ALLOWANCE`]) is shared, each helper taking an equal part
/// of the allowance: together the replicas stay within about twice what the destination showed it
/// takes, and the first sign of trouble at the pacer withdraws the share.
pub fn helper_share(f: &ShareFacts) -> Option<usize> {
    let hot = f.allowance >= HOT_ALLOWANCE && f.in_flight * 2 >= f.allowance;
    (f.replicas > 1 && hot && f.calm && !f.limited && !f.paused && f.breaker_closed)
        .then(|| (f.allowance / f.replicas).max(1))
}

/// A rate as a generic cell: [`Pace::take`] lets an attempt start now or says when one may.
#[derive(Debug, Clone, Default)]
pub struct Pace {
    /// The theoretical arrival time of the next attempt.
    next: Option<Instant>,
    /// The interval `next` was set with.
    interval: Duration,
}

impl Pace {
    /// Takes a start at `rate` per second, now; `Err(when)` when none may start before `when`.
    pub fn take(&mut self, rate: f64, now: Instant) -> Result<(), Instant> {
        // Not a positive number (NaN included): the slowest pace, never the fastest.
        let rate = if rate > 0.0 { rate.min(Limits::MAX_PER_SECOND) } else { 0.0 };
        let interval = interval_of(rate);
        // A hundredth of a second's worth may start at once (at least one): a fast rate needs
        // no timer finer than the runtime's.
        let burst = (rate / 100.0).floor().max(1.0);
        let tolerance = interval.mul_f64(burst - 1.0);
        // A changed rate applies from the last start: the next one is due one new interval
        // after it, not one old interval (a rate raised from one a day waits no day).
        if interval != self.interval
            && let Some(next) = self.next
        {
            let rebased = next.checked_sub(self.interval).and_then(|last| last.checked_add(interval));
            self.next = Some(rebased.unwrap_or(now));
        }
        self.interval = interval;
        let next = self.next.unwrap_or(now).max(now);
        if let Some(earliest) = next.checked_sub(tolerance)
            && earliest > now
        {
            return Err(earliest);
        }
        self.next = Some(next.checked_add(interval).unwrap_or(next));
        Ok(())
    }

    /// Whether the pace still holds back a start after `now` (a later start would have to wait),
    /// so it must be remembered.
    pub fn holds_after(&self, now: Instant) -> bool {
        self.next.is_some_and(|next| next > now)
    }
}

/// The longest wait between two starts: a rate slower than one per century (or none that can be
/// read as a positive number) is held to one per century, longer than any event is kept.
pub const LONGEST_INTERVAL: Duration = Duration::from_secs(100 * 365 * 86_400);

/// The time between two starts at `rate` per second, however small the rate (never a panic).
fn interval_of(rate: f64) -> Duration {
    Duration::try_from_secs_f64(1.0 / rate).map_or(LONGEST_INTERVAL, |d| d.min(LONGEST_INTERVAL))
}

/// Whether a tenant holding `held` slots may start one more, in a replica of `max` slots with
/// `free` free now: always within its share (`share` of `max`, at least one); beyond it only while
/// no other tenant has a job waiting for a slot and the start leaves a reserve (an eighth of the
/// slots, at least one) free for a tenant that comes next.
pub fn tenant_may_start(held: usize, max: usize, free: usize, share: f64, others_waiting: bool) -> bool {
    if free == 0 {
        return false;
    }
    let within = ((max as f64 * share).floor() as usize).max(1);
    if held < within {
        return true;
    }
    !others_waiting && free > reserve(max)
}

/// Slots a tenant beyond its share leaves free: an eighth of the replica's, at least one.
pub fn reserve(max: usize) -> usize {
    (max / 8).max(1)
}

#[cfg(test)]
mod tests;

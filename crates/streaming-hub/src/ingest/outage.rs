//! What the log says while a dependency (Kafka) is out of reach: the change of state once, when
//! the outage starts and when it ends, and in between a summary at a slow interval, instead of a
//! line for every failed connection (librdkafka reports one per broker and retry, several a
//! second). The metrics and `/readyz` carry the state at every moment; the log tells the story.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One thing to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Say {
    /// The first failure after a healthy spell.
    Started,
    /// Still failing: `errors` failures since the last line.
    Still { down_for: Duration, errors: u64 },
    /// A success after failures: the outage lasted `down_for` and saw `errors` failures.
    Ended { down_for: Duration, errors: u64 },
}

/// The state of one dependency as the log has told it.
#[derive(Debug, Default, Clone)]
pub struct Told {
    /// When the outage started; `None` while healthy.
    since: Option<Instant>,
    last_line: Option<Instant>,
    unsaid: u64,
    total: u64,
}

impl Told {
    /// A failure at `now`: what to log, if anything.
    pub fn failed(&mut self, now: Instant, interval: Duration) -> Option<Say> {
        self.total += 1;
        let Some(since) = self.since else {
            (self.since, self.last_line, self.unsaid, self.total) = (Some(now), Some(now), 0, 1);
            return Some(Say::Started);
        };
        if self.last_line.is_some_and(|last| now.saturating_duration_since(last) < interval) {
            self.unsaid += 1;
            return None;
        }
        let errors = self.unsaid + 1;
        (self.last_line, self.unsaid) = (Some(now), 0);
        Some(Say::Still { down_for: now.saturating_duration_since(since), errors })
    }

    /// A success at `now`: what to log, if anything (only the end of an outage).
    pub fn succeeded(&mut self, now: Instant) -> Option<Say> {
        let since = self.since.take()?;
        let errors = self.total;
        *self = Self::default();
        Some(Say::Ended { down_for: now.saturating_duration_since(since), errors })
    }
}

/// The outage log of one dependency, shared by the tasks that meet it.
#[derive(Debug)]
pub struct OutageLog {
    what: &'static str,
    interval: Duration,
    told: Mutex<Told>,
}

impl OutageLog {
    pub fn new(what: &'static str, interval: Duration) -> Self {
        Self { what, interval, told: Mutex::new(Told::default()) }
    }

    fn told(&self) -> std::sync::MutexGuard<'_, Told> {
        self.told.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A failure; `error` is logged only with a line the rule lets through.
    pub fn failed(&self, error: &dyn std::fmt::Display) {
        let said = self.told().failed(Instant::now(), self.interval);
        match said {
            Some(Say::Started) => {
                tracing::warn!(error = %error, "{} is unreachable; retrying (said again every {:?} while it lasts)", self.what, self.interval)
            }
            Some(Say::Still { down_for, errors }) => {
                tracing::warn!(error = %error, down_for = ?down_for, errors, "{} is still unreachable", self.what)
            }
            Some(Say::Ended { .. }) | None => {}
        }
    }

    /// A success: logs the end of an outage, if one was under way.
    pub fn succeeded(&self) {
        if let Some(Say::Ended { down_for, errors }) = self.told().succeeded(Instant::now()) {
            tracing::info!(down_for = ?down_for, errors, "{} is reachable again", self.what);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_told_once_then_summarized_then_ended() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let interval = Duration::from_secs(60);
        let mut told = Told::default();
        assert_eq!(told.succeeded(at(0)), None, "nothing to end while healthy");
        assert_eq!(told.failed(at(0), interval), Some(Say::Started));
        // 28 failures a second for a minute: not one line more until the interval is up.
        let mut lines = 0;
        for ms in (36..60_000).step_by(36) {
            lines += usize::from(told.failed(at(ms), interval).is_some());
        }
        assert_eq!(lines, 0);
        match told.failed(at(60_000), interval) {
            Some(Say::Still { down_for, errors }) => {
                assert_eq!(down_for, Duration::from_secs(60));
                assert_eq!(errors, (36..60_000).step_by(36).count() as u64 + 1);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(told.failed(at(60_001), interval), None);
        match told.succeeded(at(61_000)) {
            Some(Say::Ended { down_for, .. }) => assert_eq!(down_for, Duration::from_secs(61)),
            other => panic!("{other:?}"),
        }
        assert_eq!(told.succeeded(at(61_001)), None, "an end is told once");
        assert_eq!(told.failed(at(62_000), interval), Some(Say::Started), "a new outage is told again");
    }
}

//! Time as a parameter: the hub reads the clock only through [`Clock`], so tests can move it.

use std::fmt::Debug;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Utc};

/// `at` plus `d`, saturating at the latest time there is (a configured duration never panics).
pub fn after(at: DateTime<Utc>, d: std::time::Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d).ok().and_then(|d| at.checked_add_signed(d)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `at` minus `d`, saturating at the earliest time there is.
pub fn before(at: DateTime<Utc>, d: std::time::Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d).ok().and_then(|d| at.checked_sub_signed(d)).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> DateTime<Utc>;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Real time shifted by an offset that only grows: time still flows, and a test can jump ahead
/// by hours.
#[derive(Debug, Default)]
pub struct ShiftedClock {
    offset_ms: AtomicI64,
}

impl ShiftedClock {
    pub fn advance(&self, by: std::time::Duration) {
        self.offset_ms.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
    }
}

impl Clock for ShiftedClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::milliseconds(self.offset_ms.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::{DateTime, Utc};

    /// However long a configured duration, adding or taking it saturates.
    #[test]
    fn durations_saturate_at_the_ends_of_time() {
        let now = Utc::now();
        assert_eq!(super::after(now, Duration::from_secs(90)), now + chrono::Duration::seconds(90));
        assert_eq!(super::after(now, Duration::MAX), DateTime::<Utc>::MAX_UTC);
        assert_eq!(super::after(now, Duration::from_secs(u64::MAX / 4)), DateTime::<Utc>::MAX_UTC);
        assert_eq!(super::before(now, Duration::from_secs(60)), now - chrono::Duration::seconds(60));
        assert_eq!(super::before(now, Duration::MAX), DateTime::<Utc>::MIN_UTC);
    }
}

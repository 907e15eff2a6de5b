//! Time as a parameter: the hub reads the clock only through [`Clock`], so tests can move it.

use std::fmt::Debug;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Utc};

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

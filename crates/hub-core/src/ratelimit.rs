//! A token bucket: `rate` tokens per second, holding at most `burst`. Time is an input.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Duration,
}

impl TokenBucket {
    /// A full bucket at time `now` (any monotonic origin).
    pub fn new(rate: u32, burst: u32, now: Duration) -> Self {
        let burst = f64::from(burst.max(1));
        Self { rate: f64::from(rate.max(1)), burst, tokens: burst, last: now }
    }

    fn refill(&mut self, now: Duration) {
        let elapsed = now.saturating_sub(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = self.last.max(now);
    }

    /// Takes one token, or says how long until one is available.
    pub fn try_take(&mut self, now: Duration) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }

    /// True when the bucket is full at `now`, so forgetting it changes nothing.
    pub fn is_full(&mut self, now: Duration) -> bool {
        self.refill(now);
        self.tokens >= self.burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_rate() {
        let t = Duration::from_secs(100);
        let mut b = TokenBucket::new(10, 3, t);
        assert!(b.try_take(t).is_ok());
        assert!(b.try_take(t).is_ok());
        assert!(b.try_take(t).is_ok());
        let wait = b.try_take(t).expect_err("burst spent");
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        assert!(b.try_take(t + Duration::from_millis(99)).is_err());
        assert!(b.try_take(t + Duration::from_millis(201)).is_ok());
        assert!(!b.is_full(t + Duration::from_millis(201)));
        assert!(b.is_full(t + Duration::from_secs(10)));
    }

    #[test]
    fn time_going_backwards_does_not_mint_tokens() {
        let t = Duration::from_secs(100);
        let mut b = TokenBucket::new(1, 1, t);
        assert!(b.try_take(t).is_ok());
        assert!(b.try_take(Duration::from_secs(50)).is_err());
        assert!(b.try_take(t).is_err());
    }
}

//! Per-minute delivery statistics of a subscription: counts and a latency histogram with fixed
//! bounds, so minutes from any replica add up and percentiles are read from the sum.

/// Upper bounds (inclusive, in ms) of the latency buckets; one more bucket holds everything
/// slower.
pub const LATENCY_BOUNDS_MS: [i64; 15] =
    [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000];
/// Buckets of a histogram.
pub const BUCKETS: usize = LATENCY_BOUNDS_MS.len() + 1;

/// Attempt latencies, counted per bucket.
pub type Histogram = [i64; BUCKETS];

/// The bucket of a latency.
pub fn bucket_of(latency_ms: i64) -> usize {
    LATENCY_BOUNDS_MS.iter().position(|&b| latency_ms <= b).unwrap_or(BUCKETS - 1)
}

/// Adds `b` into `a`.
pub fn add(a: &mut Histogram, b: &Histogram) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// The `q` quantile (0 < q ≤ 1) of a histogram in ms, interpolated linearly inside its bucket;
/// `None` when it is empty. The open last bucket answers its lower bound.
pub fn quantile(h: &Histogram, q: f64) -> Option<f64> {
    let total: i64 = h.iter().sum();
    if total <= 0 {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
    let mut below = 0_i64;
    for (i, &n) in h.iter().enumerate() {
        if n > 0 && (below + n) as f64 >= rank {
            let low = if i == 0 { 0 } else { LATENCY_BOUNDS_MS[i - 1] } as f64;
            let Some(&high) = LATENCY_BOUNDS_MS.get(i) else { return Some(low) };
            let within = (rank - below as f64) / n as f64;
            return Some(low + within * (high as f64 - low));
        }
        below += n;
    }
    LATENCY_BOUNDS_MS.last().map(|&b| b as f64)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn latencies_fall_in_their_bucket_and_quantiles_read_back() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(150), 7);
        assert_eq!(bucket_of(60_000), BUCKETS - 2);
        assert_eq!(bucket_of(90_000), BUCKETS - 1);
        let mut h = [0; BUCKETS];
        assert_eq!(quantile(&h, 0.5), None);
        // 100 attempts between 5 and 10 ms: the median is in that bucket.
        h[bucket_of(7)] = 100;
        let p50 = quantile(&h, 0.5).expect("p50");
        assert!((5.0..=10.0).contains(&p50), "{p50}");
        // One slow attempt in 100 moves p99 into the slow bucket only at 2 in 100.
        h[bucket_of(7)] = 98;
        h[bucket_of(1_500)] = 2;
        assert!(quantile(&h, 0.99).expect("p99") > 1_000.0);
        assert!(quantile(&h, 0.5).expect("p50") <= 10.0);
        let mut slow = [0; BUCKETS];
        slow[BUCKETS - 1] = 3;
        assert_eq!(quantile(&slow, 0.99), Some(60_000.0), "the open bucket answers its lower bound");
    }

    proptest! {
        /// Whatever the latencies: p50 ≤ p99, each within the bounds of the slowest and fastest
        /// buckets used, and adding two histograms counts every attempt once.
        #[test]
        fn quantiles_are_ordered_and_bounded(a in prop::collection::vec(0_i64..200_000, 1..300),
                                              b in prop::collection::vec(0_i64..200_000, 0..300)) {
            let of = |xs: &[i64]| {
                let mut h = [0_i64; BUCKETS];
                for &x in xs { h[bucket_of(x)] += 1; }
                h
            };
            let (ha, hb) = (of(&a), of(&b));
            let (p50, p99) = (quantile(&ha, 0.5).expect("p50"), quantile(&ha, 0.99).expect("p99"));
            prop_assert!(p50 <= p99);
            let min = *a.iter().min().expect("min");
            let max = *a.iter().max().expect("max");
            let low = if bucket_of(min) == 0 { 0 } else { LATENCY_BOUNDS_MS[bucket_of(min) - 1] } as f64;
            let high = LATENCY_BOUNDS_MS.get(bucket_of(max)).copied().unwrap_or(60_000) as f64;
            prop_assert!(p50 >= low && p99 <= high, "{p50} {p99} not in {low}..{high}");
            let mut sum = ha;
            add(&mut sum, &hb);
            prop_assert_eq!(sum.iter().sum::<i64>(), (a.len() + b.len()) as i64);
        }
    }
}

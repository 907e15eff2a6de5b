//! Who paces a destination when several replicas deliver (SPEC §3, docs/SCALING.md).
//!
//! Every destination key falls in one of [`BUCKETS`] buckets ([`bucket_of`], a stable hash, so
//! every replica and every version agrees and the store can keep it beside the subscription).
//! Each bucket is owned by exactly one live delivery replica, chosen by rendezvous hashing
//! ([`owner`]): every replica computes the same owner from the same live set, with no election,
//! and a change of the set moves only the buckets it must (a replica that joins takes buckets
//! from the others and gives none between them; one that leaves gives its own away and nothing
//! else moves). The owner alone claims a bucket's jobs, so everything that paces a destination
//! (rate, attempts in flight, allowance, `Retry-After`, breaker) is one replica's memory and holds
//! across the cluster.

use uuid::Uuid;

/// How many buckets destinations fall in: enough that a few replicas share them evenly.
pub const BUCKETS: i32 = 1024;

/// The bucket of a destination key: FNV-1a over its bytes (stable across builds and
/// platforms; the store keeps it), folded into `0..BUCKETS`.
pub fn bucket_of(key: &str) -> i32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // `BUCKETS` is positive and small: the remainder fits.
    (mix(h) % BUCKETS as u64) as i32
}

/// A bijective 64-bit finalizer (splitmix64's), so neighbouring inputs score far apart.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The rendezvous score of `replica` for `bucket`: the highest score owns it.
fn score(replica: Uuid, bucket: i32) -> u64 {
    let (hi, lo) = replica.as_u64_pair();
    mix(hi ^ mix(lo ^ mix(bucket as u64)))
}

/// The live replica that owns `bucket`; `None` when none is live.
pub fn owner(bucket: i32, live: &[Uuid]) -> Option<Uuid> {
    live.iter().copied().max_by_key(|r| (score(*r, bucket), *r))
}

/// The buckets `me` owns among `live` (which should hold `me`), in order.
pub fn owned(me: Uuid, live: &[Uuid]) -> Vec<i32> {
    (0..BUCKETS).filter(|b| owner(*b, live) == Some(me)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn replicas(seeds: &[u128]) -> Vec<Uuid> {
        let mut v: Vec<Uuid> = seeds.iter().map(|s| Uuid::from_u128(*s)).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    #[test]
    fn a_key_falls_in_the_same_bucket_on_every_build() {
        // Stored beside subscriptions: a change here would split a destination between owners.
        assert_eq!(bucket_of("webhook https://example.com/hook"), bucket_of("webhook https://example.com/hook"));
        let spread: std::collections::HashSet<i32> =
            (0..4000).map(|i| bucket_of(&format!("webhook https://r{i}.example/"))).collect();
        assert!(spread.len() > 900, "4 000 keys fell in only {} buckets", spread.len());
        assert!((0..4000).all(|i| (0..BUCKETS).contains(&bucket_of(&format!("k{i}")))));
        assert_eq!(bucket_of("webhook https://example.com/hook"), 835, "the stored buckets depend on this value");
    }

    #[test]
    fn three_replicas_share_the_buckets_evenly() {
        let live = replicas(&[1, 2, 3]);
        for r in &live {
            let n = owned(*r, &live).len();
            assert!((250..=430).contains(&n), "{r} owns {n} of {BUCKETS}");
        }
    }

    proptest! {
        #[test]
        fn every_bucket_has_one_owner_among_the_live(seeds in proptest::collection::vec(any::<u128>(), 1..6)) {
            let live = replicas(&seeds);
            let mut total = 0;
            for r in &live {
                total += owned(*r, &live).len();
            }
            prop_assert_eq!(total, BUCKETS as usize);
            for b in 0..BUCKETS {
                prop_assert!(live.contains(&owner(b, &live).unwrap()));
            }
        }

        #[test]
        fn a_replica_that_leaves_moves_only_its_own_buckets(seeds in proptest::collection::vec(any::<u128>(), 2..6), gone in any::<prop::sample::Index>()) {
            let live = replicas(&seeds);
            prop_assume!(live.len() >= 2);
            let leaving = live[gone.index(live.len())];
            let rest: Vec<Uuid> = live.iter().copied().filter(|r| *r != leaving).collect();
            for b in 0..BUCKETS {
                let before = owner(b, &live).unwrap();
                let after = owner(b, &rest).unwrap();
                if before != leaving {
                    prop_assert_eq!(before, after, "bucket {} moved between replicas that stayed", b);
                }
            }
        }

        #[test]
        fn a_replica_that_joins_takes_buckets_and_no_other_moves(seeds in proptest::collection::vec(any::<u128>(), 1..5), new in any::<u128>()) {
            let live = replicas(&seeds);
            let joining = Uuid::from_u128(new);
            prop_assume!(!live.contains(&joining));
            let mut more = live.clone();
            more.push(joining);
            for b in 0..BUCKETS {
                let before = owner(b, &live).unwrap();
                let after = owner(b, &more).unwrap();
                prop_assert!(after == before || after == joining);
            }
        }
    }
}

//! Replicas as registered: who delivers, seen alive when, and what each paces.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A replica's heartbeat row.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaRecord {
    pub id: Uuid,
    /// What operators know it by (its host name, or `STREAMING_HUB_REPLICA_NAME`).
    pub name: String,
    /// Whether it claims delivery jobs (its role delivers): only those own destinations.
    pub delivers: bool,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    /// What it paces now (destinations with a rate, a pause or an allowance below its ceiling),
    /// as the dispatcher describes them: a JSON array.
    pub pacing: serde_json::Value,
}

/// A lease token of `replica`'s: the first eight bytes of the replica's id, then eight random
/// bytes. The jobs a replica leased are the tokens in [`lease_tokens_of`], so those of a replica
/// that died are found and given back at once.
pub fn lease_token(replica: Uuid) -> Uuid {
    Uuid::from_u64_pair(replica.as_u64_pair().0, Uuid::new_v4().as_u64_pair().1)
}

/// The range (both ends included) that every [`lease_token`] of `replica` falls in.
pub fn lease_tokens_of(replica: Uuid) -> (Uuid, Uuid) {
    let prefix = replica.as_u64_pair().0;
    (Uuid::from_u64_pair(prefix, 0), Uuid::from_u64_pair(prefix, u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replicas_tokens_fall_in_its_range_and_no_others() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let (lo, hi) = lease_tokens_of(a);
        for _ in 0..1000 {
            let t = lease_token(a);
            assert!(lo <= t && t <= hi);
            // Text order (SQLite stores the hyphenated form) agrees with byte order.
            assert!(lo.hyphenated().to_string() <= t.hyphenated().to_string());
            assert!(t.hyphenated().to_string() <= hi.hyphenated().to_string());
            let other = lease_token(b);
            assert!(!(lo <= other && other <= hi) || a.as_u64_pair().0 == b.as_u64_pair().0);
        }
    }
}

//! Connections kept between the hot statements (ingest writes, outcome records, claims and their
//! loads) instead of going back to the pool after each.
//!
//! sqlx checks every connection returned to its pool with a round trip of its own (a `Sync`
//! answered by `ReadyForQuery`) before another task may take it, so each statement through the
//! pool costs the server and the hub two round trips. The hot statements take a kept connection
//! instead and give it back here when the statement succeeded; what failed, or was cancelled,
//! goes back to the pool as usual, checked there.
//!
//! **Invariants:** at most [`KEPT`] connections, and half the pool, are kept; none stays kept
//! once idle for [`super::CHECK_IDLE_AFTER`] (it goes back to the pool, which checks it when next
//! handed out), nor for longer than [`ROUND`] in all, so the pool's own rules (its lifetime, its
//! closing) reach every connection; closing the store closes every kept connection first. A
//! connection is given back only after its statement succeeded.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::Postgres;
use sqlx::pool::PoolConnection;

/// Connections kept at most: about the hot statements in flight at once (a few group writers,
/// Kafka partitions, the recorder, two claimers with their loads), and never more than half the
/// pool, which serves everything else. The rest come from the pool as usual.
const KEPT: usize = 8;
/// How long a connection goes round between the hot statements before it goes back to the pool.
const ROUND: Duration = Duration::from_secs(30);

/// One kept connection.
#[derive(Debug)]
struct Held {
    conn: PoolConnection<Postgres>,
    /// When it was taken from the pool.
    since: Instant,
    /// When it was last given back.
    idle_since: Instant,
}

/// The kept connections of one store (see the module documentation).
#[derive(Debug)]
pub(super) struct Kept {
    held: Mutex<Vec<Held>>,
    /// At most this many are kept.
    limit: usize,
    closed: std::sync::atomic::AtomicBool,
}

/// A connection taken for a hot statement: give it back with [`Kept::give_back`] once the
/// statement succeeded, or drop it (back to the pool).
#[derive(Debug)]
pub(super) struct Taken {
    pub conn: PoolConnection<Postgres>,
    since: Instant,
}

impl Kept {
    /// Keeps up to [`KEPT`] connections of a pool of `pool_size`, half of it at most.
    pub fn new(pool_size: usize) -> Self {
        Self { held: Mutex::new(Vec::new()), limit: KEPT.min(pool_size / 2), closed: Default::default() }
    }

    /// A kept connection fresh enough to use, or one from `pool`.
    pub async fn take(&self, pool: &sqlx::PgPool) -> Result<Taken, sqlx::Error> {
        let fresh = {
            let mut held = self.lock();
            let now = Instant::now();
            // The newest first: the others age out.
            let fresh = held.pop().filter(|h| Self::fresh(h, now));
            held.retain(|h| Self::fresh(h, now));
            fresh
        };
        match fresh {
            Some(h) => Ok(Taken { conn: h.conn, since: h.since }),
            None => Ok(Taken { conn: pool.acquire().await?, since: Instant::now() }),
        }
    }

    /// Keeps a connection whose statement succeeded, unless enough are kept, it went round long
    /// enough, or the store is closing: then it goes back to the pool.
    pub fn give_back(&self, taken: Taken) {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) || taken.since.elapsed() >= ROUND {
            return;
        }
        let mut held = self.lock();
        if held.len() < self.limit {
            held.push(Held { conn: taken.conn, since: taken.since, idle_since: Instant::now() });
        }
    }

    /// Closes every kept connection (its session ends cleanly, as the pool's do when it closes)
    /// and keeps none from now on: the store is closing.
    pub async fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::Release);
        let held = std::mem::take(&mut *self.lock());
        for h in held {
            let _ = h.conn.close().await;
        }
    }

    fn fresh(h: &Held, now: Instant) -> bool {
        now.duration_since(h.idle_since) < super::CHECK_IDLE_AFTER && now.duration_since(h.since) < ROUND
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

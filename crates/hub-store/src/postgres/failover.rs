//! After a failover the database's address can lead, for a while, to a server that only reads:
//! the old primary rejoining as a standby, or a standby not yet promoted behind a moved endpoint.
//! Connections made to it stay healthy as far as the pool can tell, and every write on them fails
//! with `25006 read_only_sql_transaction` until they age out. So:
//!
//! - a new connection is checked once: a server in recovery or read-only by default is refused
//!   as if it had not answered (the caller retries, as after any lost connection);
//! - a write refused as read-only marks the moment; every connection made before that mark is
//!   closed instead of being handed out again, so the pool reconnects through the address,
//!   which by then leads to the new primary.
//!
//! The mark is the process's, not one pool's: every store of a process points at the same
//! database in practice, and a pool reconnecting once for nothing costs a handshake per
//! connection.
//!
//! The check of a new connection also sets what every session of the hub runs with (JIT
//! compilation off; see `prepare_session`), so preparing a connection stays one round trip.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);
/// Milliseconds since [`BASE`] of the last read-only refusal, plus one; 0 for never.
static MARK: AtomicU64 = AtomicU64::new(0);

/// Whether the error is a write refused because the server only reads.
pub fn is_read_only(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("25006"))
}

/// A write was refused as read-only now: connections made until now are not used again.
pub fn note_read_only() {
    let now = u64::try_from(BASE.elapsed().as_millis()).unwrap_or(u64::MAX);
    MARK.fetch_max(now.saturating_add(1), Ordering::AcqRel);
}

/// Whether a connection of this age was made before the last read-only refusal.
pub fn made_before_mark(age: Duration) -> bool {
    let mark = MARK.load(Ordering::Acquire);
    if mark == 0 {
        return false;
    }
    let made = BASE.elapsed().saturating_sub(age);
    u64::try_from(made.as_millis()).unwrap_or(u64::MAX) < mark
}

/// Prepares a new connection, in one round trip. Its session does without JIT compilation: the
/// hub's statements each touch a few rows, but on a large job table the planner's estimates pass
/// `jit_above_cost`, and a claim that ran in a millisecond was compiled for a second first (a
/// fan-out's backlog; docs/DECISIONS.md). And a server that cannot take writes is refused, as an
/// I/O error: to every caller it is a database not reachable yet, tried again.
pub async fn prepare_session(conn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    let (recovering, read_only, _): (bool, String, String) = sqlx::query_as(
        "SELECT pg_is_in_recovery(), current_setting('transaction_read_only'), set_config('jit', 'off', false)",
    )
    .fetch_one(&mut *conn)
    .await?;
    if recovering || read_only == "on" {
        let what = if recovering { "a standby in recovery" } else { "read-only (default_transaction_read_only)" };
        return Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            format!("the server at this address is {what}; waiting for a primary"),
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_made_before_a_read_only_refusal_are_stale_and_later_ones_are_not() {
        std::thread::sleep(Duration::from_millis(5));
        let before = BASE.elapsed();
        note_read_only();
        // A connection made 2 ms before now: before the mark.
        assert!(made_before_mark(BASE.elapsed() - before + Duration::from_millis(2)));
        std::thread::sleep(Duration::from_millis(5));
        // One made just now: after it.
        assert!(!made_before_mark(Duration::ZERO));
    }
}

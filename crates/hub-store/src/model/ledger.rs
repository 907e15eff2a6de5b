//! The ledger as stored (SPEC §11, "Proof of delivery"): entries numbered per log, the complete
//! nodes of each log's tree, and its signed checkpoints. The hashing and the proofs are
//! `hub_core::ledger`'s; the store keeps, numbers and fetches.

use chrono::{DateTime, Utc};
use hub_core::ledger::checkpoint::Checkpoint;
use hub_core::ledger::{Hash, Node};
use uuid::Uuid;

/// An entry to append. Its index is given by the store, in the order of appending, under its
/// log's head (so indexes have no gaps and follow commit order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLedgerEntry {
    /// The log's key (`hub_core::ledger::checkpoint::Log::key`): a tenant id, or empty for the
    /// platform's.
    pub log: String,
    pub at: DateTime<Utc>,
    /// `delivery` or `change`.
    pub kind: &'static str,
    /// The entry's exact bytes (JSON text): what its leaf hashes.
    pub data: String,
    /// The event it is about, so erasure can forget its digest key.
    pub event_id: Option<Uuid>,
    /// The key of the digest the entry holds of what was sent: outside the log (not hashed,
    /// not exported), destroyed by erasure.
    pub digest_key: Option<Vec<u8>>,
}

/// An entry as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntryRecord {
    pub index: u64,
    pub at: DateTime<Utc>,
    pub kind: String,
    pub data: String,
    /// The leaf hash computed when it was appended.
    pub leaf_hash: Hash,
}

/// What integrating a log's new entries starts from, as [`crate::Ledger::integrate_ledger`]
/// hands it over under the log's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Integration {
    pub log: String,
    /// How many entries the tree holds so far (its last checkpoint's size).
    pub size: u64,
    /// That tree's peaks, as `hub_core::ledger::peaks(size)` names them.
    pub peaks: Vec<(Node, Hash)>,
    /// The entries after it, in order (as many as were asked for).
    pub entries: Vec<LedgerEntryRecord>,
}

/// What an integration writes: the grown tree's new nodes and peaks, and its checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub nodes: Vec<(Node, Hash)>,
    pub peaks: Vec<(Node, Hash)>,
    pub checkpoint: Checkpoint,
    pub signed_at: DateTime<Utc>,
}

/// Where a log's kept entries begin (docs/LEDGER.md, "Retention"): the entries below `size` are
/// past retention and gone, with the nodes and checkpoints over them; `peaks` are the peaks of
/// the tree of `size` entries, all a proof about a later entry needs of what lies below it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerStart {
    pub size: u64,
    pub peaks: Vec<(Node, Hash)>,
}

impl LedgerStart {
    /// The hash of `node` when it is one of the start's peaks.
    pub fn peak(&self, node: Node) -> Option<Hash> {
        self.peaks.iter().find(|(n, _)| *n == node).map(|(_, h)| *h)
    }
}

/// Where one retention pass may make a log begin: after the oldest entries (`oldest`, the log's
/// first entries in order, as many as one pass may drop) recorded before `cutoff`, never past
/// what its tree holds (`integrated`: the peaks of the new start must exist). `None` when it
/// stays where it is.
pub(crate) fn cut_point(oldest: &[(u64, DateTime<Utc>)], cutoff: DateTime<Utc>, integrated: u64) -> Option<u64> {
    let first = oldest.first()?.0;
    let k = oldest
        .iter()
        .find(|(_, at)| *at >= cutoff)
        .map_or_else(|| oldest.last().map_or(first, |(i, _)| i + 1), |(i, _)| *i);
    let k = k.min(integrated);
    (k > first).then_some(k)
}

/// The peaks of the tree of `size` entries, from the nodes found in the store and the previous
/// start's peaks; `None` when one is missing.
pub(crate) fn start_peaks(size: u64, previous: &LedgerStart, found: &[(Node, Hash)]) -> Option<Vec<(Node, Hash)>> {
    hub_core::ledger::peaks(size)
        .into_iter()
        .map(|n| {
            let hash = found.iter().find(|(m, _)| *m == n).map(|(_, h)| *h).or_else(|| previous.peak(n))?;
            Some((n, hash))
        })
        .collect()
}

/// Peaks as stored: `level (1 byte) | index (8 bytes, big-endian) | hash (32)`, one after another.
pub(crate) fn peaks_to_bytes(peaks: &[(Node, Hash)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(peaks.len() * 41);
    for (n, h) in peaks {
        out.push(n.level);
        out.extend_from_slice(&n.index.to_be_bytes());
        out.extend_from_slice(h);
    }
    out
}

pub(crate) fn peaks_from_bytes(bytes: &[u8]) -> Option<Vec<(Node, Hash)>> {
    if !bytes.len().is_multiple_of(41) {
        return None;
    }
    bytes
        .chunks_exact(41)
        .map(|c| {
            let index = u64::from_be_bytes(c[1..9].try_into().ok()?);
            let hash: Hash = c[9..41].try_into().ok()?;
            Some((Node::new(c[0], index), hash))
        })
        .collect()
}

pub(crate) fn hash_from(bytes: &[u8]) -> Option<Hash> {
    bytes.try_into().ok()
}

impl Integration {
    /// Grows the tree by these entries and signs its new head with `key` at `now`: what
    /// [`crate::Ledger::integrate_ledger`] writes. Refuses (naming the entry) an entry that is
    /// missing or whose data no longer matches the hash taken when it was appended: such an
    /// entry was changed in the store and must not be sealed.
    pub fn seal(self, key: &hub_core::ledger::checkpoint::LedgerKey, now: DateTime<Utc>) -> Result<Sealed, String> {
        let log = hub_core::ledger::checkpoint::Log::from_key(&self.log);
        let mut leaves = Vec::with_capacity(self.entries.len());
        for (i, e) in self.entries.iter().enumerate() {
            let expected = self.size + i as u64;
            if e.index != expected {
                return Err(format!("{}: entry {expected} is missing from the store", log.line()));
            }
            if hub_core::ledger::leaf_hash(e.index, e.data.as_bytes()) != e.leaf_hash {
                return Err(format!(
                    "{}: entry {} was changed in the store after it was appended",
                    log.line(),
                    e.index
                ));
            }
            leaves.push(e.leaf_hash);
        }
        if leaves.is_empty() {
            return Err(format!("{}: entry {} is missing from the store", log.line(), self.size));
        }
        let grown =
            hub_core::ledger::grow(self.size, &self.peaks, &leaves).map_err(|e| format!("{}: {e}", log.line()))?;
        let head = hub_core::ledger::checkpoint::TreeHead { log, size: grown.size, root: grown.root, time: now };
        Ok(Sealed { nodes: grown.nodes, peaks: grown.peaks, checkpoint: key.sign(&head), signed_at: now })
    }
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;

    #[test]
    fn a_log_is_cut_after_its_old_entries_never_past_its_tree() {
        let t0 = DateTime::from_timestamp(1_700_000_000, 0).expect("time");
        let cutoff = t0 + Duration::days(1);
        let old = |i: u64| (i, t0);
        let new = |i: u64| (i, cutoff);
        assert_eq!(cut_point(&[old(4), old(5), new(6), new(7)], cutoff, 100), Some(6));
        assert_eq!(cut_point(&[old(4), old(5), old(6)], cutoff, 100), Some(7), "a budget's worth, all old");
        assert_eq!(cut_point(&[old(4), old(5), old(6)], cutoff, 6), Some(6), "never past the sealed tree");
        assert_eq!(cut_point(&[new(4), new(5)], cutoff, 100), None, "nothing old");
        assert_eq!(cut_point(&[old(4)], cutoff, 4), None, "nothing sealed");
        assert_eq!(cut_point(&[], cutoff, 100), None);
    }
}

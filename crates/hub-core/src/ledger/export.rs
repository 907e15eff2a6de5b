//! A ledger's export (JSON lines) and its offline verification: what `streaming-hub ledger
//! verify` and a partner's own check read.
//!
//! One JSON object per line, told apart by `type`:
//! - `ledger` first: which log, and the format;
//! - `key`: a public key that signed checkpoints (a JWK, as `/.well-known/ledger-keys.json`);
//! - `entry`: its index, its exact `data` (the bytes the leaf hashes, as a string) and the leaf
//!   hash the hub stored;
//! - `checkpoint`: a signed tree head, right after the last entry it covers (or before it:
//!   checkpoints ahead of the entries wait for them).
//!
//! Verification recomputes every leaf hash and the tree from the entries alone, checks every
//! checkpoint's signature with the listed keys and its root against the recomputed tree of its
//! size, and names the first entry that does not fit.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::checkpoint::{Checkpoint, Log, jwk_public};
use super::{Growth, Hash, Node, grow, leaf_hash};

/// The export format this code writes and reads.
pub const FORMAT: u32 = 1;

/// One line of an export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    Ledger {
        log: String,
        format: u32,
    },
    Key {
        jwk: Value,
    },
    Entry {
        index: u64,
        data: String,
        leaf_hash: String,
    },
    Checkpoint(Checkpoint),
    /// Where a log whose first entries are past retention begins: its size then, and the peaks
    /// of that tree (what later entries grow from). The first checkpoint after it authenticates
    /// them: no other peaks lead to its signed root.
    Start {
        size: u64,
        peaks: Vec<Peak>,
    },
}

/// A peak of a retained log's beginning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peak {
    pub level: u8,
    pub index: u64,
    /// Standard base64.
    pub hash: String,
}

impl Line {
    /// The first line of a log's export.
    pub fn ledger(log: &Log) -> Self {
        Line::Ledger { log: log.line(), format: FORMAT }
    }

    pub fn entry(index: u64, data: &str, leaf: &Hash) -> Self {
        Line::Entry { index, data: data.to_owned(), leaf_hash: STANDARD.encode(leaf) }
    }

    /// Where a log whose first `size` entries are past retention begins, with that tree's peaks.
    pub fn start(size: u64, peaks: &[(Node, Hash)]) -> Self {
        let peaks =
            peaks.iter().map(|(n, h)| Peak { level: n.level, index: n.index, hash: STANDARD.encode(h) }).collect();
        Line::Start { size, peaks }
    }
}

/// What a verification found to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub log: String,
    /// The first entry the export holds (0 unless earlier ones are past retention).
    pub start: u64,
    /// The log's size at its last entry.
    pub entries: u64,
    pub checkpoints: u64,
    /// The largest signed size, and its root (standard base64).
    pub signed_size: u64,
    pub signed_root: Option<String>,
}

/// The first thing in an export that does not fit, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("line {line}: not a ledger export line ({why})")]
    Unreadable { line: usize, why: String },
    #[error("the export does not begin with its ledger line")]
    NoHeader,
    #[error("the export is in format {0}; this verifier reads format {FORMAT}")]
    Format(u32),
    #[error("line {line}: a key that is not an Ed25519 public key")]
    Key { line: usize },
    #[error("entry {expected} is missing (line {line} holds entry {found})")]
    Missing { line: usize, expected: u64, found: u64 },
    #[error("entry {index} (line {line}): its data does not match its stored hash")]
    Altered { line: usize, index: u64 },
    #[error("entry {index} (line {line}): its stored hash is not a SHA-256 digest")]
    BadHash { line: usize, index: u64 },
    #[error("{0}")]
    Checkpoint(#[from] super::checkpoint::CheckpointError),
    #[error(
        "checkpoint {size} (signed {time}) does not match the entries: one of entries {from}..{last} was changed, removed or reordered"
    )]
    Root { size: u64, time: String, from: u64, last: u64 },
    #[error("checkpoint {size} (signed {time}) covers entries the export does not hold (it ends at {entries})")]
    Short { size: u64, time: String, entries: u64 },
    #[error("two checkpoints of size {size} disagree")]
    Forked { size: u64 },
    #[error("line {line}: a start whose peaks do not fit a tree of {size} entries, or that comes after entries")]
    Start { line: usize, size: u64 },
}

/// Verifies an export read line by line, with the keys it lists.
pub fn verify<I, S>(lines: I) -> Result<Verified, Mismatch>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    verify_with(lines, None)
}

/// Verifies an export with `pinned` keys (`kid`, raw Ed25519 public key) obtained elsewhere
/// (the hub's `/.well-known/ledger-keys.json`): the keys the export lists are then ignored.
pub fn verify_with<I, S>(lines: I, pinned: Option<Vec<(String, Vec<u8>)>>) -> Result<Verified, Mismatch>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut log: Option<Log> = None;
    let pinning = pinned.is_some();
    let mut keys: Vec<(String, Vec<u8>)> = pinned.unwrap_or_default();
    let mut tree: Growth = grow(0, &[], &[]).map_err(|_| Mismatch::NoHeader)?;
    // Checkpoints not yet reached by the entries, by size: (root, time).
    let mut waiting: BTreeMap<u64, (Hash, String)> = BTreeMap::new();
    // Sizes already checked, with their roots (a second checkpoint of a size must agree).
    let mut checked: BTreeMap<u64, Hash> = BTreeMap::new();
    let mut last_good = 0u64;
    let mut checkpoints = 0u64;
    // Where the entries begin, once a `start` line said so; whether any entry was read.
    let mut start = 0u64;
    let mut entries_seen = false;
    for (n, text) in lines.into_iter().enumerate() {
        let line = n + 1;
        let text = text.as_ref().trim();
        if text.is_empty() {
            continue;
        }
        let parsed: Line = serde_json::from_str(text).map_err(|e| Mismatch::Unreadable { line, why: e.to_string() })?;
        let Some(current) = &log else {
            let Line::Ledger { log: name, format } = parsed else {
                return Err(Mismatch::NoHeader);
            };
            if format != FORMAT {
                return Err(Mismatch::Format(format));
            }
            log = Some(log_of(&name).ok_or(Mismatch::Unreadable { line, why: "unknown log name".into() })?);
            continue;
        };
        match parsed {
            Line::Ledger { .. } => return Err(Mismatch::Unreadable { line, why: "a second ledger line".into() }),
            Line::Key { jwk } => {
                let key = jwk_public(&jwk).ok_or(Mismatch::Key { line })?;
                if !pinning {
                    keys.push(key);
                }
            }
            Line::Start { size, peaks } => {
                if entries_seen || start != 0 {
                    return Err(Mismatch::Start { line, size });
                }
                let peaks: Option<Vec<(Node, Hash)>> = peaks
                    .iter()
                    .map(|p| {
                        let hash: Hash = STANDARD.decode(&p.hash).ok()?.try_into().ok()?;
                        Some((Node::new(p.level, p.index), hash))
                    })
                    .collect();
                tree = peaks.and_then(|peaks| grow(size, &peaks, &[]).ok()).ok_or(Mismatch::Start { line, size })?;
                start = size;
                last_good = size;
            }
            Line::Checkpoint(c) => {
                let root = c.verify(current, &keys)?;
                checkpoints += 1;
                if c.size < start {
                    // Signed before the entries the export holds: its signature is all there is
                    // to check.
                    continue;
                }
                if c.size <= tree.size {
                    // Already reached: checked against the roots met on the way, or now.
                    let known = checked.get(&c.size).copied();
                    match known {
                        Some(r) if r != root => return Err(Mismatch::Forked { size: c.size }),
                        Some(_) => {}
                        None if c.size == tree.size => {
                            if root != tree.root {
                                return Err(root_mismatch(c.size, c.time, last_good));
                            }
                            checked.insert(c.size, root);
                            last_good = last_good.max(c.size);
                        }
                        // An earlier size not kept: the export was not in order of size.
                        None => return Err(Mismatch::Unreadable { line, why: "a checkpoint listed after entries beyond its size (each must follow the entries it covers)".into() }),
                    }
                } else if let Some((r, _)) = waiting.get(&c.size) {
                    if *r != root {
                        return Err(Mismatch::Forked { size: c.size });
                    }
                } else {
                    waiting.insert(c.size, (root, c.time));
                }
            }
            Line::Entry { index, data, leaf_hash: stored } => {
                entries_seen = true;
                if index != tree.size {
                    return Err(Mismatch::Missing { line, expected: tree.size, found: index });
                }
                let stored: Hash = STANDARD
                    .decode(&stored)
                    .ok()
                    .and_then(|h| h.try_into().ok())
                    .ok_or(Mismatch::BadHash { line, index })?;
                let leaf = leaf_hash(index, data.as_bytes());
                if leaf != stored {
                    return Err(Mismatch::Altered { line, index });
                }
                tree = grow(tree.size, &tree.peaks, &[leaf]).map_err(|_| Mismatch::Missing {
                    line,
                    expected: tree.size,
                    found: index,
                })?;
                if let Some((root, time)) = waiting.remove(&tree.size) {
                    if root != tree.root {
                        return Err(root_mismatch(tree.size, time, last_good));
                    }
                    checked.insert(tree.size, root);
                    last_good = tree.size;
                }
            }
        }
    }
    let Some(log) = log else {
        return Err(Mismatch::NoHeader);
    };
    if let Some((size, (_, time))) = waiting.into_iter().next() {
        return Err(Mismatch::Short { size, time, entries: tree.size });
    }
    let signed = checked.last_key_value().map(|(s, r)| (*s, STANDARD.encode(r)));
    Ok(Verified {
        log: log.line(),
        start,
        entries: tree.size,
        checkpoints,
        signed_size: signed.as_ref().map_or(0, |(s, _)| *s),
        signed_root: signed.map(|(_, r)| r),
    })
}

fn root_mismatch(size: u64, time: String, last_good: u64) -> Mismatch {
    Mismatch::Root { size, time, from: last_good, last: size.saturating_sub(1) }
}

/// The log a `ledger` line names.
pub fn log_of(line: &str) -> Option<Log> {
    match line.split_once(' ') {
        Some(("tenant", t)) if !t.is_empty() => Some(Log::Tenant(t.to_owned())),
        None if line == "platform" => Some(Log::Platform),
        _ => None,
    }
}

/// The keys of a JWKS document (`{"keys": [...]}`) that are Ed25519 public keys.
pub fn keys_of(document: &Value) -> Vec<(String, Vec<u8>)> {
    document["keys"].as_array().map(|keys| keys.iter().filter_map(jwk_public).collect()).unwrap_or_default()
}

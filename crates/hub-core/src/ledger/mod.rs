//! The ledger's Merkle log (SPEC §11, "Proof of delivery"): how entries become a tree whose
//! signed head proves every entry before it.
//!
//! Hashing is RFC 9162's (Certificate Transparency v2): a leaf hashes `0x00 || leaf data`, an
//! inner node `0x01 || left || right`, and a tree of `n` leaves splits at the largest power of
//! two below `n`. A leaf's data is its index (8 bytes, big-endian) followed by the entry's bytes,
//! so an entry moved to another position no longer fits its hash.
//!
//! Nodes are named by `(level, index)`: level 0 are the leaves, and node `(l, i)` covers leaves
//! `i·2^l .. (i+1)·2^l`. Only *complete* nodes (all their leaves present) are ever stored, so a
//! stored node never changes as the log grows. Everything else (a tree head, a proof) is folded
//! from complete nodes here; the store only keeps and fetches them.
//!
//! **Invariant:** nothing in this module reads a clock, a key store or a database: it is the
//! same code the hub, the offline `ledger verify` and the tests run.

pub mod checkpoint;
pub mod entry;
pub mod export;
pub mod proof;

#[cfg(test)]
mod tests;

use sha2::{Digest, Sha256};

/// A SHA-256 digest.
pub type Hash = [u8; 32];

/// The hash of a tree with no leaves (RFC 9162 §2.1.1: the hash of the empty string).
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The hash of the entry at `index` whose bytes are `body`.
pub fn leaf_hash(index: u64, body: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(index.to_be_bytes());
    h.update(body);
    h.finalize().into()
}

/// The hash of an inner node from its two children.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// A complete subtree: level 0 is one leaf, level `l` the `2^l` leaves from `index·2^l`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    pub level: u8,
    pub index: u64,
}

impl Node {
    pub const fn new(level: u8, index: u64) -> Self {
        Self { level, index }
    }

    /// The first leaf it covers.
    pub fn first_leaf(self) -> u64 {
        self.index << self.level
    }

    /// How many leaves it covers.
    pub fn width(self) -> u64 {
        1u64 << self.level
    }

    /// Its two children (for a level above 0).
    pub fn children(self) -> (Node, Node) {
        let level = self.level.saturating_sub(1);
        (Node::new(level, self.index * 2), Node::new(level, self.index * 2 + 1))
    }
}

/// The complete nodes that cover leaves `start .. end`, largest first: the subtrees whose hashes,
/// folded from the right, are the hash of that range (RFC 9162's `MTH`). `start` must be a
/// multiple of the largest power of two not above `end - start`, as every range the tree's
/// recursion makes is.
pub fn cover(start: u64, end: u64) -> Vec<Node> {
    let mut nodes = Vec::new();
    let mut at = start;
    while at < end {
        let rest = end - at;
        let level = 63 - rest.leading_zeros() as u8;
        // An unaligned start (never made by the tree's own ranges) is split further.
        let level = level.min(if at == 0 { 63 } else { at.trailing_zeros() as u8 });
        nodes.push(Node::new(level, at >> level));
        at += 1u64 << level;
    }
    nodes
}

/// The peaks of a tree of `size` leaves: the complete subtrees its root is folded from.
pub fn peaks(size: u64) -> Vec<Node> {
    cover(0, size)
}

/// Folds subtree hashes (largest first, as [`cover`] lists them) into the hash of their range.
pub fn fold(hashes: &[Hash]) -> Hash {
    let Some((last, rest)) = hashes.split_last() else {
        return empty_root();
    };
    rest.iter().rev().fold(*last, |right, left| node_hash(left, &right))
}

/// What appending leaves to a tree makes: the complete nodes above level 0 it did not have, and
/// the new tree's peaks and root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Growth {
    pub size: u64,
    pub root: Hash,
    /// The new complete nodes (level ≥ 1), children before parents.
    pub nodes: Vec<(Node, Hash)>,
    /// The peaks of the grown tree with their hashes (what the next growth starts from).
    pub peaks: Vec<(Node, Hash)>,
}

/// Why a growth could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrowthError {
    #[error("the peaks given do not match a tree of {0} leaves")]
    Peaks(u64),
    #[error("the tree cannot grow beyond 2^63 leaves")]
    Full,
}

/// Appends `leaves` (their hashes, in order) to the tree of `size` leaves whose peaks are
/// `peaks` (as [`peaks`] names them, with their hashes).
pub fn grow(size: u64, peaks: &[(Node, Hash)], leaves: &[Hash]) -> Result<Growth, GrowthError> {
    if peaks.iter().map(|(n, _)| *n).ne(self::peaks(size)) {
        return Err(GrowthError::Peaks(size));
    }
    let end = size.checked_add(leaves.len() as u64).filter(|e| *e < 1 << 63).ok_or(GrowthError::Full)?;
    let mut stack: Vec<(Node, Hash)> = peaks.to_vec();
    let mut nodes = Vec::new();
    for (i, leaf) in leaves.iter().enumerate() {
        stack.push((Node::new(0, size + i as u64), *leaf));
        // Two neighbours of one level are the two halves of a complete parent.
        while let [.., (left, l), (right, r)] = stack.as_slice()
            && left.level == right.level
        {
            let parent = (Node::new(left.level + 1, left.index / 2), node_hash(l, r));
            stack.truncate(stack.len() - 2);
            nodes.push(parent);
            stack.push(parent);
        }
    }
    let hashes: Vec<Hash> = stack.iter().map(|(_, h)| *h).collect();
    Ok(Growth { size: end, root: fold(&hashes), nodes, peaks: stack })
}

/// The root of a whole list of leaf hashes, computed the slow and obvious way (RFC 9162's
/// recursive definition): the reference the tests hold everything else to.
pub fn reference_root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => empty_root(),
        1 => leaves[0],
        n => {
            let k = split(n as u64) as usize;
            node_hash(&reference_root(&leaves[..k]), &reference_root(&leaves[k..]))
        }
    }
}

/// The largest power of two below `n` (for `n ≥ 2`): where RFC 9162 splits a tree.
pub(crate) fn split(n: u64) -> u64 {
    1u64 << (63 - (n - 1).leading_zeros())
}

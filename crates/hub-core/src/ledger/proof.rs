//! Inclusion and consistency proofs (RFC 9162 §2.1.3 and §2.1.4): which subtrees a proof is
//! made of, and the verification a holder of the proof runs without the log.
//!
//! A proof is a list of subtree hashes. Here a proof is first *planned* as ranges of leaves
//! (each the [`cover`] of complete nodes the store holds), then *filled* with their hashes:
//! the store fetches exactly the nodes a plan names, whatever the size of the log.

use super::{Hash, Node, cover, fold, node_hash, split};

/// Why a proof does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("entry {index} is not in a tree of {size} entries")]
    OutOfRange { index: u64, size: u64 },
    #[error("a tree of {from} entries cannot grow into one of {to}")]
    Shrinks { from: u64, to: u64 },
    #[error("the proof has the wrong number of hashes")]
    Length,
    #[error("the proof does not lead to the tree head")]
    Mismatch,
}

/// The leaf ranges (`start..end`) whose hashes prove that leaf `index` is in the tree of `size`
/// leaves, leaf side first.
pub fn inclusion_plan(index: u64, size: u64) -> Result<Vec<(u64, u64)>, ProofError> {
    if index >= size {
        return Err(ProofError::OutOfRange { index, size });
    }
    let mut ranges = Vec::new();
    path(index, 0, size, &mut ranges);
    Ok(ranges)
}

// RFC 9162's PATH(m, D[start:end]), the innermost sibling pushed first.
fn path(m: u64, start: u64, end: u64, out: &mut Vec<(u64, u64)>) {
    let n = end - start;
    if n <= 1 {
        return;
    }
    let k = split(n);
    if m < k {
        path(m, start, start + k, out);
        out.push((start + k, end));
    } else {
        path(m - k, start + k, end, out);
        out.push((start, start + k));
    }
}

/// The leaf ranges whose hashes prove that the tree of `from` leaves is the beginning of the
/// tree of `to` leaves (empty when there is nothing to prove: `from` is 0 or equals `to`).
pub fn consistency_plan(from: u64, to: u64) -> Result<Vec<(u64, u64)>, ProofError> {
    if from > to {
        return Err(ProofError::Shrinks { from, to });
    }
    let mut ranges = Vec::new();
    if from > 0 && from < to {
        subproof(from, 0, to, true, &mut ranges);
    }
    Ok(ranges)
}

// RFC 9162's SUBPROOF(m, D[start:end], b).
fn subproof(m: u64, start: u64, end: u64, whole: bool, out: &mut Vec<(u64, u64)>) {
    let n = end - start;
    if m == n {
        if !whole {
            out.push((start, end));
        }
        return;
    }
    let k = split(n);
    if m <= k {
        subproof(m, start, start + k, whole, out);
        out.push((start + k, end));
    } else {
        subproof(m - k, start + k, end, false, out);
        out.push((start, start + k));
    }
}

/// Every complete node a plan needs, once each.
pub fn nodes_of(plan: &[(u64, u64)]) -> Vec<Node> {
    let mut nodes: Vec<Node> = plan.iter().flat_map(|(s, e)| cover(*s, *e)).collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}

/// The proof's hashes: each range folded from its nodes' hashes (`hash_of` answers `None` for a
/// node it does not have).
pub fn fill(plan: &[(u64, u64)], hash_of: impl Fn(Node) -> Option<Hash>) -> Option<Vec<Hash>> {
    plan.iter()
        .map(|(s, e)| cover(*s, *e).into_iter().map(&hash_of).collect::<Option<Vec<Hash>>>().map(|h| fold(&h)))
        .collect()
}

/// Checks that `leaf` (a leaf hash) is at `index` in the tree of `size` leaves whose root is
/// `root` (RFC 9162 §2.1.3.2).
pub fn verify_inclusion(index: u64, size: u64, leaf: &Hash, proof: &[Hash], root: &Hash) -> Result<(), ProofError> {
    if index >= size {
        return Err(ProofError::OutOfRange { index, size });
    }
    let (mut f, mut s) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if s == 0 {
            return Err(ProofError::Length);
        }
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(ProofError::Length);
    }
    if r != *root {
        return Err(ProofError::Mismatch);
    }
    Ok(())
}

/// Checks that the tree of `from` leaves with root `from_root` is the beginning of the tree of
/// `to` leaves with root `to_root` (RFC 9162 §2.1.4.2).
pub fn verify_consistency(
    from: u64,
    to: u64,
    from_root: &Hash,
    to_root: &Hash,
    proof: &[Hash],
) -> Result<(), ProofError> {
    if from > to {
        return Err(ProofError::Shrinks { from, to });
    }
    if from == to || from == 0 {
        // Nothing to prove: equal trees must have equal roots; the empty tree begins every tree.
        if !proof.is_empty() {
            return Err(ProofError::Length);
        }
        return if from == 0 || from_root == to_root { Ok(()) } else { Err(ProofError::Mismatch) };
    }
    let mut hashes: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if from.is_power_of_two() {
        hashes.push(*from_root);
    }
    hashes.extend_from_slice(proof);
    let Some((first, rest)) = hashes.split_first() else {
        return Err(ProofError::Length);
    };
    let (mut f, mut s) = (from - 1, to - 1);
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let (mut fr, mut sr) = (*first, *first);
    for c in rest {
        if s == 0 {
            return Err(ProofError::Length);
        }
        if f & 1 == 1 || f == s {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(ProofError::Length);
    }
    if fr != *from_root || sr != *to_root {
        return Err(ProofError::Mismatch);
    }
    Ok(())
}

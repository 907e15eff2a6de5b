use std::collections::HashMap;

use chrono::Utc;
use proptest::prelude::*;

use super::checkpoint::{Checkpoint, CheckpointError, LedgerKey, Log, TreeHead, jwk_public};
use super::proof::{
    ProofError, consistency_plan, fill, inclusion_plan, nodes_of, verify_consistency, verify_inclusion,
};
use super::*;

fn leaves(n: u64) -> Vec<Hash> {
    (0..n).map(|i| leaf_hash(i, format!("entry {i}").as_bytes())).collect()
}

/// Grows a tree in the given chunks, as the hub does, keeping every complete node it makes.
fn grown(leaves: &[Hash], chunks: &[usize]) -> (Growth, HashMap<Node, Hash>) {
    let mut store: HashMap<Node, Hash> = HashMap::new();
    let mut g = grow(0, &[], &[]).expect("holds");
    let mut at = 0;
    let mut chunks = chunks.iter().copied().cycle();
    while at < leaves.len() {
        let take = chunks.next().unwrap_or(1).clamp(1, leaves.len() - at);
        // What the store would hand back: the peaks, fetched by name.
        let peaks: Vec<(Node, Hash)> = peaks(g.size)
            .into_iter()
            .map(|n| (n, if n.level == 0 { leaves[n.index as usize] } else { store[&n] }))
            .collect();
        g = grow(g.size, &peaks, &leaves[at..at + take]).expect("holds");
        store.extend(g.nodes.iter().copied());
        at += take;
    }
    (g, store)
}

fn hash_in(leaves: &[Hash], store: &HashMap<Node, Hash>) -> impl Fn(Node) -> Option<Hash> {
    move |n: Node| if n.level == 0 { leaves.get(n.index as usize).copied() } else { store.get(&n).copied() }
}

#[test]
fn known_roots() {
    // The empty tree and a one-leaf tree, by definition.
    assert_eq!(hex(&empty_root()), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    let one = leaves(1);
    assert_eq!(reference_root(&one), one[0]);
    assert_eq!(grow(0, &[], &one).expect("holds").root, one[0]);
    // Three leaves: ((0, 1), 2).
    let three = leaves(3);
    let expected = node_hash(&node_hash(&three[0], &three[1]), &three[2]);
    assert_eq!(reference_root(&three), expected);
    assert_eq!(grow(0, &[], &three).expect("holds").root, expected);
}

#[test]
fn a_leaf_hash_binds_its_position() {
    assert_ne!(leaf_hash(0, b"x"), leaf_hash(1, b"x"));
    assert_ne!(leaf_hash(0, b"x"), leaf_hash(0, b"y"));
}

#[test]
fn growth_refuses_wrong_peaks() {
    let (g, _) = grown(&leaves(5), &[5]);
    assert_eq!(grow(4, &g.peaks, &[]), Err(GrowthError::Peaks(4)));
}

#[test]
fn covers_are_complete_aligned_nodes() {
    assert_eq!(cover(0, 7), vec![Node::new(2, 0), Node::new(1, 2), Node::new(0, 6)]);
    assert_eq!(cover(8, 12), vec![Node::new(2, 2)]);
    assert!(cover(3, 3).is_empty());
}

proptest! {
    #[test]
    fn growing_in_any_chunks_gives_the_reference_root(n in 0u64..300, chunks in prop::collection::vec(1usize..40, 1..8)) {
        let leaves = leaves(n);
        let (g, store) = grown(&leaves, &chunks);
        prop_assert_eq!(g.size, n);
        prop_assert_eq!(g.root, reference_root(&leaves));
        // Every stored node is the reference hash of the leaves it covers.
        for (node, hash) in &store {
            let s = node.first_leaf() as usize;
            prop_assert_eq!(*hash, reference_root(&leaves[s..s + node.width() as usize]));
        }
        // A node is made once: n leaves make n - popcount(n) inner nodes.
        prop_assert_eq!(store.len() as u64, n - u64::from(n.count_ones()));
    }

    #[test]
    fn every_inclusion_proof_verifies_and_no_other_leaf_fits(n in 1u64..200, pick in any::<prop::sample::Index>()) {
        let leaves = leaves(n);
        let (g, store) = grown(&leaves, &[7]);
        let index = pick.index(n as usize) as u64;
        let plan = inclusion_plan(index, n).expect("holds");
        let proof = fill(&plan, hash_in(&leaves, &store)).expect("holds");
        prop_assert_eq!(verify_inclusion(index, n, &leaves[index as usize], &proof, &g.root), Ok(()));
        // Another leaf, another index, a wrong root or a cut proof: refused.
        let other = leaf_hash(index, b"forged");
        prop_assert!(verify_inclusion(index, n, &other, &proof, &g.root).is_err());
        if n > 1 {
            prop_assert!(verify_inclusion((index + 1) % n, n, &leaves[index as usize], &proof, &g.root).is_err());
            prop_assert!(verify_inclusion(index, n, &leaves[index as usize], &proof[1..], &g.root).is_err());
        }
        prop_assert!(verify_inclusion(index, n, &leaves[index as usize], &proof, &empty_root()).is_err());
        // The plan names only complete nodes the tree holds.
        for node in nodes_of(&plan) {
            prop_assert!(node.first_leaf() + node.width() <= n);
        }
    }

    #[test]
    fn every_consistency_proof_verifies_and_a_rewritten_past_does_not(to in 1u64..200, pick in any::<prop::sample::Index>(), forged in any::<prop::sample::Index>()) {
        let leaves = leaves(to);
        let from = pick.index(to as usize + 1) as u64;
        let (big, store) = grown(&leaves, &[5, 9]);
        let small = reference_root(&leaves[..from as usize]);
        let plan = consistency_plan(from, to).expect("holds");
        let proof = fill(&plan, hash_in(&leaves, &store)).expect("holds");
        prop_assert_eq!(verify_consistency(from, to, &small, &big.root, &proof), Ok(()));
        if from > 0 {
            // The same tree with one earlier entry changed is not a continuation.
            let mut other = leaves.clone();
            let at = forged.index(from as usize);
            other[at] = leaf_hash(at as u64, b"rewritten");
            let rewritten = reference_root(&other);
            let (_, other_store) = grown(&other, &[3]);
            let other_proof = fill(&plan, hash_in(&other, &other_store)).expect("holds");
            prop_assert!(verify_consistency(from, to, &small, &rewritten, &other_proof).is_err());
        }
    }
}

proptest! {
    /// Retention keeps, of what lies below a log's start, only the start's peaks: every node a
    /// proof about a kept entry, or the consistency of a kept size, needs below the start is one.
    #[test]
    fn what_proofs_of_kept_entries_need_below_the_start_is_its_peaks(
        start in 1u64..300, above in 0u64..300, pick in any::<prop::sample::Index>(), from in any::<prop::sample::Index>()
    ) {
        let size = start + above.max(1);
        let kept = peaks(start);
        let below = |n: &Node| n.first_leaf() + n.width() <= start;
        let entry = start + pick.index((size - start) as usize) as u64;
        for n in nodes_of(&inclusion_plan(entry, size).expect("plan")).iter().filter(|n| below(n)) {
            prop_assert!(kept.contains(n), "inclusion of {entry} in {size} needs {n:?} below {start}");
        }
        let old = start + from.index((size - start) as usize + 1) as u64;
        for n in nodes_of(&consistency_plan(old, size).expect("plan")).iter().filter(|n| below(n)) {
            prop_assert!(kept.contains(n), "consistency of {old} with {size} needs {n:?} below {start}");
        }
    }
}

#[test]
fn proofs_of_the_impossible_are_refused() {
    assert_eq!(inclusion_plan(3, 3), Err(ProofError::OutOfRange { index: 3, size: 3 }));
    assert_eq!(consistency_plan(5, 4), Err(ProofError::Shrinks { from: 5, to: 4 }));
    let r = leaves(1)[0];
    assert_eq!(verify_consistency(1, 1, &r, &r, &[r]), Err(ProofError::Length));
    assert_eq!(verify_inclusion(0, 1, &r, &[r], &r), Err(ProofError::Length));
}

fn key() -> LedgerKey {
    LedgerKey::from_pkcs8("k1", &LedgerKey::generate().expect("holds")).expect("holds")
}

fn head(size: u64) -> TreeHead {
    TreeHead {
        log: Log::Tenant("acme".into()),
        size,
        root: reference_root(&leaves(size)),
        time: chrono::DateTime::from_timestamp_millis(1_765_000_000_123).expect("in range"),
    }
}

#[test]
fn a_checkpoint_verifies_with_its_published_key_only() {
    let key = key();
    let keys = vec![jwk_public(&key.jwk()).expect("holds")];
    let c = key.sign(&head(9));
    assert!(c.note.starts_with("streaming-hub ledger v1\ntenant acme\n9\n"));
    assert_eq!(c.verify(&Log::Tenant("acme".into()), &keys), Ok(head(9).root));
    // Another log, another key, a changed field or a changed text: refused, each by name.
    assert_eq!(c.verify(&Log::Platform, &keys), Err(CheckpointError::Note { size: 9 }));
    let stranger = vec![jwk_public(&self::key().jwk()).expect("holds")];
    assert_eq!(c.verify(&Log::Tenant("acme".into()), &stranger), Err(CheckpointError::Signature { size: 9 }));
    let bigger = Checkpoint { size: 10, ..c.clone() };
    assert_eq!(bigger.verify(&Log::Tenant("acme".into()), &keys), Err(CheckpointError::Note { size: 10 }));
    let rewritten = Checkpoint { note: c.note.replace("\n9\n", "\n10\n"), ..c.clone() };
    assert_eq!(rewritten.verify(&Log::Tenant("acme".into()), &keys), Err(CheckpointError::Signature { size: 9 }));
    let unknown = Checkpoint { kid: "k2".into(), ..c };
    assert!(matches!(unknown.verify(&Log::Tenant("acme".into()), &keys), Err(CheckpointError::UnknownKey { .. })));
}

fn hex(h: &Hash) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

mod export {
    use super::super::export::{Line, Mismatch, verify};
    use super::*;

    /// An export of `n` entries with a checkpoint after every `every`, as the hub writes it.
    fn export(n: u64, every: u64) -> (Vec<String>, LedgerKey) {
        let key = key();
        let log = Log::Tenant("acme".into());
        let mut lines = vec![Line::ledger(&log), Line::Key { jwk: key.jwk() }];
        let mut g = grow(0, &[], &[]).expect("holds");
        for i in 0..n {
            let data = format!(r#"{{"kind":"delivery","n":{i}}}"#);
            let leaf = leaf_hash(i, data.as_bytes());
            lines.push(Line::entry(i, &data, &leaf));
            g = grow(g.size, &g.peaks, &[leaf]).expect("holds");
            if g.size % every == 0 || g.size == n {
                let head = TreeHead { log: log.clone(), size: g.size, root: g.root, time: Utc::now() };
                lines.push(Line::Checkpoint(key.sign(&head)));
            }
        }
        (lines.iter().map(|l| serde_json::to_string(l).expect("holds")).collect(), key)
    }

    fn entry_line(lines: &[String], index: u64) -> usize {
        lines
            .iter()
            .position(|l| l.contains(r#""type":"entry""#) && l.contains(&format!(r#""index":{index},"#)))
            .expect("holds")
    }

    fn edit(line: &str, f: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v: serde_json::Value = serde_json::from_str(line).expect("holds");
        f(&mut v);
        v.to_string()
    }

    #[test]
    fn an_untouched_export_verifies() {
        let (lines, _) = export(50, 8);
        let v = verify(&lines).expect("holds");
        assert_eq!((v.entries, v.checkpoints, v.signed_size), (50, 7, 50));
    }

    #[test]
    fn changed_data_is_named() {
        let (mut lines, _) = export(50, 8);
        let at = entry_line(&lines, 17);
        lines[at] = lines[at].replace(r#"\"n\":17"#, r#"\"n\":18"#);
        assert!(matches!(verify(&lines), Err(Mismatch::Altered { index: 17, .. })));
    }

    #[test]
    fn changed_data_with_a_recomputed_hash_is_caught_by_the_checkpoint_after_it() {
        let (mut lines, _) = export(50, 8);
        let at = entry_line(&lines, 17);
        let data = r#"{"kind":"delivery","n":999}"#;
        lines[at] = serde_json::to_string(&Line::entry(17, data, &leaf_hash(17, data.as_bytes()))).expect("holds");
        match verify(&lines) {
            Err(Mismatch::Root { size: 24, from: 16, last: 23, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_removed_entry_is_named() {
        let (mut lines, _) = export(50, 8);
        lines.remove(entry_line(&lines, 30));
        assert!(matches!(verify(&lines), Err(Mismatch::Missing { expected: 30, found: 31, .. })));
    }

    #[test]
    fn reordered_entries_are_named() {
        // Lines swapped: the first out of place is named.
        let (mut lines, _) = export(50, 8);
        let (a, b) = (entry_line(&lines, 10), entry_line(&lines, 11));
        lines.swap(a, b);
        assert!(matches!(verify(&lines), Err(Mismatch::Missing { expected: 10, found: 11, .. })));
        // Indexes swapped too: each entry's hash binds its position.
        let (mut lines, _) = export(50, 8);
        let (a, b) = (entry_line(&lines, 10), entry_line(&lines, 11));
        lines.swap(a, b);
        lines[a] = edit(&lines[a], |v| v["index"] = 10.into());
        lines[b] = edit(&lines[b], |v| v["index"] = 11.into());
        assert!(matches!(verify(&lines), Err(Mismatch::Altered { index: 10, .. })));
    }

    #[test]
    fn an_inserted_entry_is_named() {
        let (mut lines, _) = export(50, 8);
        let at = entry_line(&lines, 5);
        let data = r#"{"kind":"delivery","n":"inserted"}"#;
        lines.insert(at, serde_json::to_string(&Line::entry(5, data, &leaf_hash(5, data.as_bytes()))).expect("holds"));
        assert!(matches!(verify(&lines), Err(Mismatch::Missing { expected: 6, found: 5, .. })));
    }

    #[test]
    fn entries_cut_from_the_end_are_caught_by_the_last_checkpoint() {
        let (mut lines, _) = export(50, 8);
        let last = lines.last().expect("holds").clone();
        assert!(last.contains(r#""type":"checkpoint""#) && last.contains(r#""size":50"#));
        lines.truncate(entry_line(&lines, 45));
        lines.push(last);
        assert!(matches!(verify(&lines), Err(Mismatch::Short { size: 50, entries: 45, .. })));
    }

    #[test]
    fn a_checkpoint_signed_by_another_key_is_refused() {
        let (mut lines, _) = export(20, 8);
        let stranger = key();
        let head = TreeHead { log: Log::Tenant("acme".into()), size: 8, root: empty_root(), time: Utc::now() };
        let forged = stranger.sign(&TreeHead { ..head });
        let forged = Checkpoint { kid: "k1".into(), ..forged };
        lines.push(serde_json::to_string(&Line::Checkpoint(forged)).expect("holds"));
        assert!(matches!(verify(&lines), Err(Mismatch::Checkpoint(CheckpointError::Signature { size: 8 }))));
    }

    #[test]
    fn garbage_is_named_by_line() {
        let (mut lines, _) = export(3, 8);
        lines.insert(3, "{not json".into());
        assert!(matches!(verify(&lines), Err(Mismatch::Unreadable { line: 4, .. })));
        assert_eq!(verify(Vec::<String>::new()), Err(Mismatch::NoHeader));
    }
}

mod retained {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;

    use super::super::export::{Line, Mismatch, Peak, verify};
    use super::*;

    /// An export of `n` entries with a checkpoint after every 8, beginning at `from`: the entries
    /// before it past retention, the peaks of `from` in their place.
    fn retained(n: u64, from: u64, forge: bool) -> Vec<String> {
        let key = key();
        let log = Log::Tenant("acme".into());
        let mut lines = vec![Line::ledger(&log), Line::Key { jwk: key.jwk() }];
        let mut body = Vec::new();
        let mut g = grow(0, &[], &[]).expect("empty");
        for i in 0..n {
            if i == from {
                let peaks = g
                    .peaks
                    .iter()
                    .map(|(node, hash)| {
                        let mut hash = *hash;
                        if forge {
                            hash[0] ^= 1;
                        }
                        Peak { level: node.level, index: node.index, hash: STANDARD.encode(hash) }
                    })
                    .collect();
                lines.push(Line::Start { size: from, peaks });
                lines.append(&mut body);
            }
            let data = format!(r#"{{"n":{i}}}"#);
            let leaf = leaf_hash(i, data.as_bytes());
            body.push(Line::entry(i, &data, &leaf));
            g = grow(g.size, &g.peaks, &[leaf]).expect("grows");
            if g.size % 8 == 0 {
                let head = TreeHead { log: log.clone(), size: g.size, root: g.root, time: Utc::now() };
                body.push(Line::Checkpoint(key.sign(&head)));
            }
            if i < from {
                // Past retention: only checkpoints stay.
                body.retain(|l| matches!(l, Line::Checkpoint(_)));
            }
        }
        lines.append(&mut body);
        lines.iter().map(|l| serde_json::to_string(l).expect("line")).collect()
    }

    #[test]
    fn a_log_that_begins_after_retention_verifies_from_its_peaks() {
        for from in [1, 7, 8, 21, 33] {
            let v = verify(retained(50, from, false)).expect("verifies");
            assert_eq!((v.start, v.entries), (from, 50), "from {from}");
            assert_eq!(v.signed_size, 48);
        }
    }

    #[test]
    fn forged_peaks_fail_at_the_first_checkpoint_after_them() {
        assert!(matches!(verify(retained(50, 21, true)), Err(Mismatch::Root { size: 24, .. })));
    }
}

"""The ledger check against RFC 9162's own recursive definitions, computed here the slow way."""

import base64
import hashlib
import hmac

import pytest

from streaming_hub_receiver import ledger


def leaves(n):
    return [ledger.leaf_hash(i, f"entry {i}".encode()) for i in range(n)]


def split(n):
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(hashes):
    if not hashes:
        return hashlib.sha256(b"").digest()
    if len(hashes) == 1:
        return hashes[0]
    k = split(len(hashes))
    return ledger.node_hash(mth(hashes[:k]), mth(hashes[k:]))


def path(m, hashes):
    if len(hashes) <= 1:
        return []
    k = split(len(hashes))
    if m < k:
        return path(m, hashes[:k]) + [mth(hashes[k:])]
    return path(m - k, hashes[k:]) + [mth(hashes[:k])]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13, 64, 100])
def test_every_inclusion_proof_verifies_and_no_other_leaf_fits(size):
    hashes = leaves(size)
    root = mth(hashes)
    for index in range(size):
        proof = path(index, hashes)
        ledger.verify_inclusion(index, size, hashes[index], proof, root)
        with pytest.raises(ledger.InvalidProof):
            ledger.verify_inclusion(index, size, ledger.leaf_hash(index, b"forged"), proof, root)
        if size > 1:
            with pytest.raises(ledger.InvalidProof):
                ledger.verify_inclusion(index, size, hashes[index], proof[1:], root)


def test_an_index_outside_the_tree_is_refused():
    with pytest.raises(ledger.InvalidProof):
        ledger.verify_inclusion(3, 3, leaves(3)[0], [], mth(leaves(3)))


def test_the_sent_digest_covers_the_signing_headers_and_the_body():
    key = b"\x09" * 16
    headers = [("Webhook-Id", "e1"), ("webhook-timestamp", "1700000000"), ("webhook-signature", "v1,abc"), ("content-type", "application/json")]
    expected = hmac.new(key, b"webhook-id: e1\nwebhook-timestamp: 1700000000\nwebhook-signature: v1,abc\n\n{}", hashlib.sha256).digest()
    assert ledger.sent_digest(key, headers, b"{}") == "hmac-sha256:" + base64.b64encode(expected).decode()
    assert ledger.sent_digest(key, headers, b"{ }") != ledger.sent_digest(key, headers, b"{}")

"""Check a Streaming Hub ledger proof on the receiving side (docs/LEDGER.md), with no hub.

A tenant (or the hub's operator) hands a partner the answer of
``GET /v1/ledger/proof/inclusion?entry=N`` for a delivery, and the hub's public keys
(``/.well-known/ledger-keys.json``, best obtained separately). ``verify_inclusion_proof`` checks:
the checkpoint's Ed25519 signature and that its signed text says what its fields say; the entry's
leaf hash from its exact text; and the RFC 9162 inclusion proof from that leaf to the signed root.
``sent_digest`` recomputes the entry's ``sent`` digest from the request the receiver got and the
entry's digest key, so the partner can tell it is the very request the hub recorded.

Hashing is RFC 9162's: a leaf is SHA-256 of 0x00, the entry's index (8 bytes, big-endian) and its
text; a node is SHA-256 of 0x01, its left and its right child.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Iterable, Mapping, Sequence, Tuple

from . import ed25519

HEADER = "streaming-hub ledger v1"

#: The headers the ``sent`` digest covers, in this order, when they were sent.
DIGESTED_HEADERS = (
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "x-webhook-timestamp",
    "x-webhook-signature",
    "x-lerian-delivery-id",
)


class InvalidProof(Exception):
    """A proof, a checkpoint or an entry that does not hold; ``str()`` says which part."""


def leaf_hash(index: int, data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + index.to_bytes(8, "big") + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """RFC 9162 §2.1.3.2: ``leaf`` is entry ``index`` of the tree of ``size`` entries with ``root``."""
    if index >= size:
        raise InvalidProof(f"entry {index} is not in a tree of {size} entries")
    f, s, r = index, size - 1, leaf
    for p in proof:
        if s == 0:
            raise InvalidProof("the proof has too many hashes")
        if f & 1 or f == s:
            r = node_hash(p, r)
            while not f & 1 and f != 0:
                f >>= 1
                s >>= 1
        else:
            r = node_hash(r, p)
        f >>= 1
        s >>= 1
    if s != 0:
        raise InvalidProof("the proof has too few hashes")
    if r != root:
        raise InvalidProof("the proof does not lead to the checkpoint's root")


def _keys(document: Mapping) -> dict:
    keys = {}
    for jwk in document.get("keys", []):
        if jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519" and "kid" in jwk and "x" in jwk:
            x = jwk["x"]
            keys[jwk["kid"]] = base64.urlsafe_b64decode(x + "=" * (-len(x) % 4))
    return keys


def verify_checkpoint(checkpoint: Mapping, log: str, keys: Mapping) -> bytes:
    """Checks a checkpoint of ``log`` (``"tenant acme"`` or ``"platform"``) with the hub's JWKS
    document ``keys``; answers its root."""
    public = _keys(keys).get(checkpoint.get("kid"))
    if public is None:
        raise InvalidProof(f"checkpoint {checkpoint.get('size')}: signed by an unknown key {checkpoint.get('kid')}")
    note = checkpoint["note"].encode("utf-8")
    if not ed25519.verify(public, note, base64.b64decode(checkpoint["signature"])):
        raise InvalidProof(f"checkpoint {checkpoint.get('size')}: the signature does not match its text")
    expected = f"{HEADER}\n{log}\n{checkpoint['size']}\n{checkpoint['root']}\n{checkpoint['time']}\n"
    if checkpoint["note"] != expected:
        raise InvalidProof(f"checkpoint {checkpoint.get('size')}: its text does not say what its fields say")
    return base64.b64decode(checkpoint["root"])


def verify_inclusion_proof(answer: Mapping, keys: Mapping) -> Mapping:
    """Checks the answer of ``GET /v1/ledger/proof/inclusion`` with the hub's public keys; answers
    the entry (its fields, parsed) when everything holds, raises ``InvalidProof`` otherwise."""
    import json

    checkpoint = answer.get("checkpoint")
    if checkpoint is None:
        raise InvalidProof("the answer carries no signed checkpoint of its size")
    if checkpoint["size"] != answer["size"]:
        raise InvalidProof("the checkpoint is not of the proof's size")
    root = verify_checkpoint(checkpoint, answer["log"], keys)
    entry = answer["entry"]
    leaf = leaf_hash(entry["index"], entry["data"].encode("utf-8"))
    if base64.b64decode(entry["leaf_hash"]) != leaf:
        raise InvalidProof(f"entry {entry['index']}: its text does not match its leaf hash")
    proof = [base64.b64decode(h) for h in answer["proof"]]
    verify_inclusion(entry["index"], answer["size"], leaf, proof, root)
    return json.loads(entry["data"])


def sent_digest(key: bytes, headers: Iterable[Tuple[str, str]], body: bytes) -> str:
    """The ``sent`` digest of a request: HMAC-SHA256 under the entry's digest key of its signing
    and naming headers (``name: value\\n``, lower-case names, in ``DIGESTED_HEADERS`` order),
    a blank line, then the body."""
    pairs = [(n.lower(), v) for n, v in headers]
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for name in DIGESTED_HEADERS:
        for n, v in pairs:
            if n == name:
                mac.update(f"{n}: {v}\n".encode("utf-8"))
    mac.update(b"\n")
    mac.update(body)
    return "hmac-sha256:" + base64.b64encode(mac.digest()).decode("ascii")

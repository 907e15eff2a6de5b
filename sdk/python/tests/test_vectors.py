"""The shared vectors (sdk/vectors/webhooks.json), case by case."""

import json
import pathlib

import pytest

from streaming_hub_receiver import DEFAULT_TOLERANCE_SECONDS, InvalidDelivery, parse_headers, sign, verify, verify_ed25519
from streaming_hub_receiver import ed25519

VECTORS = json.loads((pathlib.Path(__file__).parents[2] / "vectors" / "webhooks.json").read_text("utf-8"))


def pairs(headers):
    """Headers as a framework hands them over: (name, value) pairs, repeated names repeated."""
    return [(name, value) for name, values in headers.items() for value in values]


def test_the_vectors_hold_cases_and_agree_on_the_tolerance():
    assert len(VECTORS["verify"]) >= 20 and len(VECTORS["headers"]) >= 10
    assert VECTORS["tolerance_seconds"] == DEFAULT_TOLERANCE_SECONDS


@pytest.mark.parametrize("case", VECTORS["verify"], ids=lambda c: c["name"])
@pytest.mark.parametrize("shape", ["pairs", "mapping of lists"])
def test_verify(case, shape):
    headers = pairs(case["headers"]) if shape == "pairs" else case["headers"]
    body = case["body"].encode("utf-8")
    if case["valid"]:
        verify(case["secrets"], headers, body, now=case["now"])
    else:
        with pytest.raises(InvalidDelivery) as refused:
            verify(case["secrets"], headers, body, now=case["now"])
        assert refused.value.kind == case["error"]


@pytest.mark.parametrize("case", VECTORS["verify_ed25519"], ids=lambda c: c["name"])
def test_verify_ed25519(case):
    headers = pairs(case["headers"])
    body = case["body"].encode("utf-8")
    if case["valid"]:
        verify_ed25519(case["public_keys"], headers, body, now=case["now"])
    else:
        with pytest.raises(InvalidDelivery) as refused:
            verify_ed25519(case["public_keys"], headers, body, now=case["now"])
        assert refused.value.kind == case["error"]


def test_the_integer_ed25519_follows_rfc_8032():
    """RFC 8032 §7.1, tests 1 and 2, through the package's own arithmetic (whether or not
    `cryptography` is installed)."""
    saved = ed25519.Ed25519PublicKey
    ed25519.Ed25519PublicKey = None
    try:
        key = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
        sig = bytes.fromhex(
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        )
        assert ed25519.verify(key, b"", sig)
        assert not ed25519.verify(key, b"x", sig)
        key2 = bytes.fromhex("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c")
        sig2 = bytes.fromhex(
            "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
        )
        assert ed25519.verify(key2, bytes([0x72]), sig2)
        assert not ed25519.verify(key, bytes([0x72]), sig2)
        bad_s = sig[:32] + (int.from_bytes(sig[32:], "little") + ed25519._L).to_bytes(32, "little")
        assert not ed25519.verify(key, b"", bad_s), "a non-canonical s is refused"
    finally:
        ed25519.Ed25519PublicKey = saved


@pytest.mark.parametrize("case", VECTORS["headers"], ids=lambda c: c["name"])
def test_parse_headers(case):
    headers = pairs(case["headers"])
    if "error" in case:
        with pytest.raises(InvalidDelivery) as refused:
            parse_headers(headers)
        assert (refused.value.kind, refused.value.header) == (case["error"], case["header"])
        return
    delivery = parse_headers(headers)
    got = {name: getattr(delivery, name) for name in case["delivery"]}
    assert got == case["delivery"]


def test_sign_is_the_specification_vector():
    assert (
        sign("test-secret", 1700000000, b'{"id":"123"}')
        == "v1,sha256=49d0851d6baa34655d12dfba153c748db08b84830d4cb01780d833956c59844c"
    )


def test_a_decoded_body_is_refused_loudly():
    with pytest.raises(TypeError):
        verify("s", [], '{"id":"123"}')

"""The shared vectors (sdk/vectors/webhooks.json), case by case."""

import json
import pathlib

import pytest

from streaming_hub_receiver import DEFAULT_TOLERANCE_SECONDS, InvalidDelivery, parse_headers, sign, verify

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

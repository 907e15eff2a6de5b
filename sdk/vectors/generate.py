#!/usr/bin/env python3
"""Writes webhooks.json, the vectors every receiver package is tested against.

The signatures are computed here with the standard library alone, independently of the hub and of
every package; the hub's own signer is checked against the same file (crates/streaming-hub-receiver).
Run it again only to add cases: `python3 sdk/vectors/generate.py`.
"""

import base64
import hashlib
import hmac
import json
import pathlib

NOW = 1_700_000_000
TOLERANCE = 300


def sign(secret: str, timestamp, body: str) -> str:
    message = b"v1:" + str(timestamp).encode() + b"." + body.encode("utf-8")
    return "v1,sha256=" + hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


CURRENT = "whsec_" + base64.b64encode(b"streaming-hub vectors: current!!").decode()
PREVIOUS = "whsec_" + base64.b64encode(b"streaming-hub vectors: previous!").decode()
BODY = '{"loan_id":"loan-42","amount":"1250.00","currency":"BRL"}'


def case(name, *, secrets, timestamp=NOW, signatures=None, body=BODY, headers=None, now=NOW, error=None):
    if headers is None:
        headers = {
            "X-Webhook-Timestamp": [str(timestamp)],
            "X-Webhook-Signature": signatures if signatures is not None else [sign(secrets[0], timestamp, body)],
        }
    out = {"name": name, "secrets": secrets, "now": now, "headers": headers, "body": body}
    out["valid"] = error is None
    if error:
        out["error"] = error
    return out


verify = [
    case(
        "the specification's test vector",
        secrets=["test-secret"],
        body='{"id":"123"}',
        signatures=["v1,sha256=49d0851d6baa34655d12dfba153c748db08b84830d4cb01780d833956c59844c"],
    ),
    case("a valid delivery", secrets=[CURRENT]),
    case("a body with non-ASCII characters", secrets=[CURRENT], body='{"name":"José","note":"€ 10 — ok","emoji":"🦀"}'),
    case("an empty body", secrets=[CURRENT], body=""),
    case(
        "header names in any case",
        secrets=[CURRENT],
        headers={"x-webhook-timestamp": [str(NOW)], "X-WEBHOOK-SIGNATURE": [sign(CURRENT, NOW, BODY)]},
    ),
    case(
        "a tampered body",
        secrets=[CURRENT],
        signatures=[sign(CURRENT, NOW, BODY)],
        body=BODY.replace("1250.00", "9250.00"),
        error="no_matching_signature",
    ),
    case(
        "a body with one more space",
        secrets=[CURRENT],
        signatures=[sign(CURRENT, NOW, BODY)],
        body=BODY.replace(",", ", ", 1),
        error="no_matching_signature",
    ),
    case("the wrong secret", secrets=[PREVIOUS], signatures=[sign(CURRENT, NOW, BODY)], error="no_matching_signature"),
    case(
        "the secret without its whsec_ prefix",
        secrets=[CURRENT[len("whsec_"):]],
        signatures=[sign(CURRENT, NOW, BODY)],
        error="no_matching_signature",
    ),
    case(
        "a signed timestamp other than the header's",
        secrets=[CURRENT],
        signatures=[sign(CURRENT, NOW - 1, BODY)],
        error="no_matching_signature",
    ),
    case("a timestamp at the edge of the tolerance", secrets=[CURRENT], timestamp=NOW - TOLERANCE),
    case("a stale timestamp", secrets=[CURRENT], timestamp=NOW - TOLERANCE - 1, error="timestamp_too_old"),
    case("a future timestamp at the edge", secrets=[CURRENT], timestamp=NOW + TOLERANCE),
    case("a future timestamp", secrets=[CURRENT], timestamp=NOW + TOLERANCE + 1, error="timestamp_too_new"),
    case(
        "rotation: two headers, the receiver knows the new secret",
        secrets=[CURRENT],
        signatures=[sign(CURRENT, NOW, BODY), sign(PREVIOUS, NOW, BODY)],
    ),
    case(
        "rotation: two headers, the receiver still knows only the previous secret",
        secrets=[PREVIOUS],
        signatures=[sign(CURRENT, NOW, BODY), sign(PREVIOUS, NOW, BODY)],
    ),
    case(
        "rotation: the receiver accepts both secrets, only the previous one signed",
        secrets=[CURRENT, PREVIOUS],
        signatures=[sign(PREVIOUS, NOW, BODY)],
    ),
    case(
        "rotation: both signatures joined into one value by a framework",
        secrets=[PREVIOUS],
        signatures=[sign(CURRENT, NOW, BODY) + ", " + sign(PREVIOUS, NOW, BODY)],
    ),
    case(
        "rotation: both signatures joined without a space",
        secrets=[PREVIOUS],
        signatures=[sign(CURRENT, NOW, BODY) + "," + sign(PREVIOUS, NOW, BODY)],
    ),
    case(
        "a signature with another version",
        secrets=[CURRENT],
        signatures=[sign(CURRENT, NOW, BODY).replace("v1,", "v2,")],
        error="no_matching_signature",
    ),
    case(
        "a signature in upper-case hex",
        secrets=[CURRENT],
        signatures=["v1,sha256=" + sign(CURRENT, NOW, BODY).split("=")[1].upper()],
    ),
    case(
        "a signature that is not hex",
        secrets=[CURRENT],
        signatures=["v1,sha256=" + "zz" * 32],
        error="no_matching_signature",
    ),
    case(
        "a truncated signature",
        secrets=[CURRENT],
        signatures=[sign(CURRENT, NOW, BODY)[:-2]],
        error="no_matching_signature",
    ),
    case("an empty signature header", secrets=[CURRENT], signatures=[""], error="no_matching_signature"),
    case(
        "no signature header",
        secrets=[CURRENT],
        headers={"X-Webhook-Timestamp": [str(NOW)]},
        error="missing_header",
    ),
    case(
        "no timestamp header",
        secrets=[CURRENT],
        headers={"X-Webhook-Signature": [sign(CURRENT, NOW, BODY)]},
        error="missing_header",
    ),
    case(
        "a timestamp that is not a number",
        secrets=[CURRENT],
        headers={"X-Webhook-Timestamp": ["1.7e9"], "X-Webhook-Signature": [sign(CURRENT, "1.7e9", BODY)]},
        error="malformed_header",
    ),
    case(
        "a timestamp with a sign",
        secrets=[CURRENT],
        headers={"X-Webhook-Timestamp": ["+" + str(NOW)], "X-Webhook-Signature": [sign(CURRENT, "+" + str(NOW), BODY)]},
        error="malformed_header",
    ),
    case(
        "two timestamp headers",
        secrets=[CURRENT],
        headers={"X-Webhook-Timestamp": [str(NOW), str(NOW)], "X-Webhook-Signature": [sign(CURRENT, NOW, BODY)]},
        error="malformed_header",
    ),
]

FULL = {
    "X-Webhook-Timestamp": [str(NOW)],
    "X-Lerian-Event-Id": ["0192a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"],
    "X-Lerian-Delivery-Id": ["0192a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a99"],
    "X-Lerian-Event-Type": ["loan_application.approved"],
    "X-Lerian-Tenant-Id": ["tenant-a"],
    "X-Lerian-Subscription-Id": ["0192a1b2-0000-7000-8000-000000000001"],
    "X-Lerian-Attempt": ["3"],
    "X-Lerian-Schema-Version": ["1.0.0"],
    "X-Lerian-Event-Time": ["2026-11-30T10:00:00Z"],
    "X-Lerian-Subject": ["loan-42"],
    "traceparent": ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"],
    "tracestate": ["vendor=1"],
}
FULL_PARSED = {
    "event_id": "0192a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
    "delivery_id": "0192a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a99",
    "event_type": "loan_application.approved",
    "tenant_id": "tenant-a",
    "subscription_id": "0192a1b2-0000-7000-8000-000000000001",
    "attempt": 3,
    "schema_version": "1.0.0",
    "event_time": "2026-11-30T10:00:00Z",
    "subject": "loan-42",
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "tracestate": "vendor=1",
    "timestamp": NOW,
    "is_verification": False,
}


def without(headers, name):
    return {k: v for k, v in headers.items() if k != name}


def replaced(headers, name, value):
    out = dict(headers)
    out[name] = [value]
    return out


OPTIONAL = ["X-Lerian-Subject", "traceparent", "tracestate", "X-Lerian-Schema-Version", "X-Lerian-Event-Time"]
minimal = {k: v for k, v in FULL.items() if k not in OPTIONAL}
minimal_parsed = dict(FULL_PARSED, subject=None, traceparent=None, tracestate=None, schema_version=None, event_time=None)

probe = replaced(FULL, "X-Lerian-Event-Type", "streaming_hub.verification")
probe = replaced(probe, "X-Lerian-Attempt", "1")
probe = without(probe, "X-Lerian-Subject")

headers = [
    {"name": "every header", "headers": FULL, "delivery": FULL_PARSED},
    {
        "name": "header names in any case",
        "headers": {k.lower(): v for k, v in FULL.items()},
        "delivery": FULL_PARSED,
    },
    {"name": "only the headers always sent", "headers": minimal, "delivery": minimal_parsed},
    {
        "name": "a verification probe",
        "headers": probe,
        "delivery": dict(FULL_PARSED, event_type="streaming_hub.verification", attempt=1, subject=None, is_verification=True),
    },
    {
        "name": "Standard Webhooks mode: the timestamp from webhook-timestamp",
        "headers": dict(
            without(FULL, "X-Webhook-Timestamp"),
            **{"webhook-id": [FULL["X-Lerian-Event-Id"][0]], "webhook-timestamp": [str(NOW)], "webhook-signature": ["v1,AAAA"]},
        ),
        "delivery": FULL_PARSED,
    },
    {"name": "no event id", "headers": without(FULL, "X-Lerian-Event-Id"), "error": "missing_header", "header": "X-Lerian-Event-Id"},
    {"name": "no event type", "headers": without(FULL, "X-Lerian-Event-Type"), "error": "missing_header", "header": "X-Lerian-Event-Type"},
    {"name": "no timestamp", "headers": without(FULL, "X-Webhook-Timestamp"), "error": "missing_header", "header": "X-Webhook-Timestamp"},
    {"name": "an attempt that is not a number", "headers": replaced(FULL, "X-Lerian-Attempt", "three"), "error": "malformed_header", "header": "X-Lerian-Attempt"},
    {"name": "an attempt of zero", "headers": replaced(FULL, "X-Lerian-Attempt", "0"), "error": "malformed_header", "header": "X-Lerian-Attempt"},
    {"name": "an empty event id", "headers": replaced(FULL, "X-Lerian-Event-Id", ""), "error": "malformed_header", "header": "X-Lerian-Event-Id"},
    {"name": "a timestamp that is not a number", "headers": replaced(FULL, "X-Webhook-Timestamp", "soon"), "error": "malformed_header", "header": "X-Webhook-Timestamp"},
    {
        "name": "two event ids",
        "headers": dict(FULL, **{"X-Lerian-Event-Id": ["a", "b"]}),
        "error": "malformed_header",
        "header": "X-Lerian-Event-Id",
    },
]

document = {
    "description": (
        "Receiver vectors of Streaming Hub's webhook scheme (docs/SPEC.md §3.6). Each `verify` case gives "
        "the secrets a receiver accepts, the clock (`now`, Unix seconds), the request headers (each name "
        "with its list of values, as received), the raw body (UTF-8) and the verdict: `valid`, or the "
        "`error` kind. Each `headers` case gives headers and the typed delivery they parse to, or the "
        "`error` kind and the `header` at fault. Generated by generate.py."
    ),
    "tolerance_seconds": TOLERANCE,
    "error_kinds": ["missing_header", "malformed_header", "timestamp_too_old", "timestamp_too_new", "no_matching_signature"],
    "verify": verify,
    "headers": headers,
}

path = pathlib.Path(__file__).with_name("webhooks.json")
path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
print(f"wrote {path} ({len(verify)} verify cases, {len(headers)} header cases)")

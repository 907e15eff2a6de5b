"""Webhook signatures (`X-Webhook-Signature: v1,sha256=<hex>`) and the `X-Lerian-*` headers."""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Sequence, Union

DEFAULT_TOLERANCE_SECONDS = 300
VERIFICATION_EVENT_TYPE = "streaming_hub.verification"

TIMESTAMP = "X-Webhook-Timestamp"
SIGNATURE = "X-Webhook-Signature"
_STANDARD_TIMESTAMP = "webhook-timestamp"


class InvalidDelivery(Exception):
    """A refused delivery. `kind` is one of missing_header, malformed_header, timestamp_too_old,
    timestamp_too_new, no_matching_signature; `header` names the header at fault."""

    def __init__(self, kind: str, header: Optional[str] = None):
        super().__init__(f"{kind} ({header})" if header else kind)
        self.kind = kind
        self.header = header


def _values(headers: Any, name: str) -> List[str]:
    """Every value of a header, whatever holds the headers: an object with getlist/get_all
    (Werkzeug, Starlette, email.message), a mapping of names to a string or a list, or pairs."""
    lower = name.lower()
    for accessor in ("getlist", "get_all"):
        method = getattr(headers, accessor, None)
        if callable(method):
            got = method(name)
            if got is not None:
                return [str(v) for v in got]
    items: Iterable = headers.items() if hasattr(headers, "items") else headers
    out: List[str] = []
    for key, value in items:
        if str(key).lower() != lower:
            continue
        if isinstance(value, (list, tuple)):
            out.extend(str(v) for v in value)
        else:
            out.append(str(value))
    return out


def _single(headers: Any, name: str) -> str:
    values = _values(headers, name)
    if not values:
        raise InvalidDelivery("missing_header", name)
    if len(values) > 1 or values[0] == "":
        raise InvalidDelivery("malformed_header", name)
    return values[0]


def _optional(headers: Any, name: str) -> Optional[str]:
    values = _values(headers, name)
    if len(values) > 1:
        raise InvalidDelivery("malformed_header", name)
    return values[0] if values else None


def _unsigned(raw: str) -> Optional[int]:
    return int(raw) if raw and raw.isascii() and raw.isdigit() else None


def _mac(secret: str, timestamp: str, body: bytes) -> bytes:
    message = b"v1:" + timestamp.encode("ascii") + b"." + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).digest()


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The `X-Webhook-Signature` value the hub sends; for tests of a receiver."""
    return "v1,sha256=" + _mac(secret, str(timestamp), body).hex()


def _candidates(values: Sequence[str]) -> List[bytes]:
    """Every `v1,sha256=<hex>` in the values, which a framework may have joined with commas."""
    out = []
    for value in values:
        tokens = [t.strip() for t in value.split(",")]
        for version, rest in zip(tokens, tokens[1:]):
            if version != "v1" or not rest.startswith("sha256="):
                continue
            hexed = rest[len("sha256="):]
            if len(hexed) != 64:
                continue
            try:
                out.append(bytes.fromhex(hexed))
            except ValueError:
                continue
    return out


def _within_tolerance(timestamp: int, now: Optional[float], tolerance: int, header: str) -> None:
    age = int(time.time() if now is None else now) - timestamp
    if age > tolerance:
        raise InvalidDelivery("timestamp_too_old", header)
    if -age > tolerance:
        raise InvalidDelivery("timestamp_too_new", header)


def verify(
    secrets: Union[str, Sequence[str]],
    headers: Any,
    body: bytes,
    *,
    now: Optional[float] = None,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
) -> None:
    """Checks a delivery on its raw body; raises InvalidDelivery when it must be refused.

    `secrets` are the signing secrets you accept (both during a rotation), exactly as the API
    showed them. Every `X-Webhook-Signature` value is tried, in constant time each."""
    if isinstance(secrets, str):
        secrets = [secrets]
    if isinstance(body, str):
        raise TypeError("verify the raw body bytes, not a decoded string")
    raw = _single(headers, TIMESTAMP)
    timestamp = _unsigned(raw)
    if timestamp is None:
        raise InvalidDelivery("malformed_header", TIMESTAMP)
    signatures = _values(headers, SIGNATURE)
    if not signatures:
        raise InvalidDelivery("missing_header", SIGNATURE)
    _within_tolerance(timestamp, now, tolerance, TIMESTAMP)
    candidates = _candidates(signatures)
    for secret in secrets:
        expected = _mac(secret, raw, bytes(body))
        if any(hmac.compare_digest(expected, c) for c in candidates):
            return
    raise InvalidDelivery("no_matching_signature", SIGNATURE)


WEBHOOK_ID = "webhook-id"
WEBHOOK_SIGNATURE = "webhook-signature"


def verify_ed25519(
    public_keys: Union[str, Sequence[str]],
    headers: Any,
    body: bytes,
    *,
    now: Optional[float] = None,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
) -> None:
    """Checks a delivery of an ed25519 webhook (`sink.signature` "ed25519") on its raw body;
    raises InvalidDelivery when it must be refused.

    `public_keys` are the subscription's public keys you accept (`whpk_...` as the API showed
    them; both during a rotation). One `v1a,<base64>` value of `webhook-signature`
    (space-separated) must be an ed25519 signature of "{webhook-id}.{webhook-timestamp}.{body}"."""
    import base64
    import binascii

    from . import ed25519

    if isinstance(public_keys, str):
        public_keys = [public_keys]
    if isinstance(body, str):
        raise TypeError("verify the raw body bytes, not a decoded string")
    message_id = _single(headers, WEBHOOK_ID)
    raw = _single(headers, _STANDARD_TIMESTAMP)
    timestamp = _unsigned(raw)
    if timestamp is None:
        raise InvalidDelivery("malformed_header", _STANDARD_TIMESTAMP)
    signatures = _values(headers, WEBHOOK_SIGNATURE)
    if not signatures:
        raise InvalidDelivery("missing_header", WEBHOOK_SIGNATURE)
    _within_tolerance(timestamp, now, tolerance, _STANDARD_TIMESTAMP)

    def decode(text: str) -> Optional[bytes]:
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return None

    keys = [k for k in (decode(key[5:] if key.startswith("whpk_") else key) for key in public_keys) if k]
    message = f"{message_id}.{raw}.".encode("utf-8") + bytes(body)
    for value in signatures:
        for token in value.split(" "):
            if not token.startswith("v1a,"):
                continue
            signature = decode(token[4:])
            if signature and any(ed25519.verify(key, message, signature) for key in keys):
                return
    raise InvalidDelivery("no_matching_signature", WEBHOOK_SIGNATURE)


@dataclass(frozen=True)
class Delivery:
    """What the hub's headers say about one delivery."""

    event_id: str
    """The CloudEvents id: the same on every redelivery. Deduplicate by it."""
    delivery_id: str
    event_type: str
    """The event key `<resourcetype>.<eventtype>`."""
    tenant_id: str
    subscription_id: str
    attempt: int
    schema_version: Optional[str]
    event_time: Optional[str]
    subject: Optional[str]
    traceparent: Optional[str]
    tracestate: Optional[str]
    timestamp: int

    @property
    def is_verification(self) -> bool:
        """The hub's verification probe: answer 2xx with a body containing its challenge."""
        return self.event_type == VERIFICATION_EVENT_TYPE


def parse_headers(headers: Any) -> Delivery:
    """Reads the `X-Lerian-*` headers and the timestamp. Verifies nothing: call verify first."""
    required = {
        name: _single(headers, header)
        for name, header in (
            ("event_id", "X-Lerian-Event-Id"),
            ("delivery_id", "X-Lerian-Delivery-Id"),
            ("event_type", "X-Lerian-Event-Type"),
            ("tenant_id", "X-Lerian-Tenant-Id"),
            ("subscription_id", "X-Lerian-Subscription-Id"),
        )
    }
    attempt = _unsigned(_single(headers, "X-Lerian-Attempt"))
    if attempt is None or attempt < 1:
        raise InvalidDelivery("malformed_header", "X-Lerian-Attempt")
    timestamp_header = TIMESTAMP
    if not _values(headers, TIMESTAMP) and _values(headers, _STANDARD_TIMESTAMP):
        timestamp_header = _STANDARD_TIMESTAMP
    try:
        timestamp = _unsigned(_single(headers, timestamp_header))
    except InvalidDelivery as e:
        raise InvalidDelivery(e.kind, TIMESTAMP) from None
    if timestamp is None:
        raise InvalidDelivery("malformed_header", TIMESTAMP)
    return Delivery(
        attempt=attempt,
        schema_version=_optional(headers, "X-Lerian-Schema-Version"),
        event_time=_optional(headers, "X-Lerian-Event-Time"),
        subject=_optional(headers, "X-Lerian-Subject"),
        traceparent=_optional(headers, "traceparent"),
        tracestate=_optional(headers, "tracestate"),
        timestamp=timestamp,
        **required,
    )

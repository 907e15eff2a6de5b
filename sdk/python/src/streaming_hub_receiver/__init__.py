"""Verify and read Streaming Hub deliveries."""

from .pull import ApiError, PullConsumer
from .webhook import (
    DEFAULT_TOLERANCE_SECONDS,
    VERIFICATION_EVENT_TYPE,
    Delivery,
    InvalidDelivery,
    parse_headers,
    sign,
    verify,
    verify_ed25519,
)

__all__ = [
    "ApiError",
    "DEFAULT_TOLERANCE_SECONDS",
    "Delivery",
    "InvalidDelivery",
    "PullConsumer",
    "VERIFICATION_EVENT_TYPE",
    "parse_headers",
    "sign",
    "verify",
    "verify_ed25519",
]

"""Verify a Streaming Hub webhook (Python 3, standard library only).

Call with the raw request body (bytes, before any parsing), the X-Webhook-Timestamp header, every
X-Webhook-Signature header value (your framework's list accessor; never split a joined string on
commas), and every secret you currently accept (two during a rotation).
"""
import hashlib
import hmac
import time


def verify(secrets, timestamp, body, signatures, now=None, tolerance=300):
    now = int(time.time()) if now is None else now
    try:
        ts = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs(now - ts) > tolerance:  # older or newer than 5 minutes: refuse (replay protection)
        return False
    message = b"v1:" + str(ts).encode() + b"." + body
    for secret in secrets:
        expected = "v1,sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
        for received in signatures:
            if hmac.compare_digest(expected, received.strip()):
                return True
    return False


if __name__ == "__main__":
    # Checks this file against the spec's test vector: python3 verify.py
    sig = "v1,sha256=49d0851d6baa34655d12dfba153c748db08b84830d4cb01780d833956c59844c"
    body = b'{"id":"123"}'
    assert verify(["test-secret"], "1700000000", body, [sig], now=1700000000)
    assert verify(["other", "test-secret"], "1700000000", body, ["v1,sha256=00", sig], now=1700000100)
    assert not verify(["test-secret"], "1700000000", body + b" ", [sig], now=1700000000)
    assert not verify(["wrong"], "1700000000", body, [sig], now=1700000000)
    assert not verify(["test-secret"], "1700000000", body, [sig], now=1700000301)
    print("python: ok")

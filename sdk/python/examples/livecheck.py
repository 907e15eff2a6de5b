"""Runs the package against a live hub's deliveries, for the hub's own test suite
(crates/streaming-hub/tests/it/sdk.rs): verifies and parses each captured delivery, refuses each
tampered one, drains a pull subscription, and prints what it saw as JSON."""

import base64
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "src"))

from streaming_hub_receiver import InvalidDelivery, PullConsumer, parse_headers, verify  # noqa: E402


def main(path):
    data = json.loads(pathlib.Path(path).read_text("utf-8"))
    out = {"verified": [], "rejected": [], "pulled": []}
    for d in data["deliveries"]:
        body = base64.b64decode(d["body"])
        verify(data["secrets"], d["headers"], body)
        out["verified"].append(parse_headers(d["headers"]).event_id)
    for d in data["tampered"]:
        try:
            verify(data["secrets"], d["headers"], base64.b64decode(d["body"]))
        except InvalidDelivery as e:
            out["rejected"].append(e.kind)
        else:
            sys.exit("a tampered delivery verified")
    pull = data["pull"]
    consumer = PullConsumer(pull["base_url"], pull["api_key"], pull["subscription_id"], limit=7)
    consumer.drain(lambda e: out["pulled"].append(e["ceId"]))
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])

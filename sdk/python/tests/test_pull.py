"""The pull helper against a server that answers like the hub's pull route."""

import json
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

import pytest

from streaming_hub_receiver import ApiError, PullConsumer
from streaming_hub_receiver.pull import parse_page, retry_after_seconds

from local_server import LocalServer


class Hub:
    def __init__(self, events, limited=0):
        self.events, self.limited, self.cursor, self.requests = events, limited, 0, []
        self.local = LocalServer(self.handle)
        self.url = self.local.url

    def handle(self, request, _body):
        self.requests.append(request.path)
        url = urlparse(request.path)
        if request.headers["Authorization"] != "Bearer key-1" or url.path != "/v1/subscriptions/sub-1/events":
            return request.answer(404, {"code": 404, "title": "not_found", "message": "no such subscription"})
        if self.limited:
            self.limited -= 1
            return request.answer(429, {"code": 429, "title": "rate_limited", "message": "slow down"}, [("Retry-After", "2")])
        q = parse_qs(url.query)
        limit = int(q.get("limit", ["100"])[0])
        after = int(q.get("after", [self.cursor])[0])
        items = [{"seq": s, "ceId": f"id-{s}", "type": "a.b", "payload": {}} for s in range(after + 1, self.events + 1)][:limit]
        if items:
            self.cursor = max(self.cursor, items[-1]["seq"])
        next_cursor = items[-1]["seq"] if len(items) == limit else None
        request.answer(200, {"items": items, "next_cursor": next_cursor})

    def close(self):
        self.local.close()


@pytest.fixture
def hub():
    servers = []

    def start(events, limited=0):
        servers.append(Hub(events, limited))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_drain_pages_to_the_end_and_waits_out_rate_limits(hub):
    server = hub(25, limited=2)
    slept = []
    consumer = PullConsumer(server.url + "/", "key-1", "sub-1", limit=10, sleep=slept.append)
    seen = []
    assert consumer.drain(lambda e: seen.append(e["seq"])) == 25
    assert seen == list(range(1, 26))
    assert slept == [2.0, 2.0], "each 429 waited for its Retry-After"
    assert server.requests == [
        "/v1/subscriptions/sub-1/events?limit=10",
        "/v1/subscriptions/sub-1/events?limit=10",
        "/v1/subscriptions/sub-1/events?limit=10",
        "/v1/subscriptions/sub-1/events?after=10&limit=10",
        "/v1/subscriptions/sub-1/events?after=20&limit=10",
    ]


def test_errors_come_in_the_hubs_shape(hub):
    server = hub(3)
    with pytest.raises(ApiError) as refused:
        PullConsumer(server.url, "key-1", "other").next_page()
    assert (refused.value.code, refused.value.title) == (404, "not_found")


def test_retry_after_forms():
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds("0") == 0.1
    assert retry_after_seconds("3600", ceiling=5) == 5
    assert retry_after_seconds("nonsense") == 1.0
    assert retry_after_seconds(None) == 1.0
    assert 0.1 <= retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") <= 0.1


def test_an_item_no_parser_here_can_read_never_costs_its_page():
    deep = "[" * 5000 + "]" * 5000
    items = [json.dumps({"seq": 1, "ceId": "a", "payload": {"s": "[{\\\"x"}})]
    items.append('{"seq": 2, "ceId": "b", "payload": ' + deep + "}")
    items += [json.dumps({"seq": s, "ceId": f"id-{s}", "payload": [1, {"k": "]"}]}) for s in range(3, 9)]
    raw = ('{"items": [' + ", ".join(items) + '], "next_cursor": null}').encode()
    page = parse_page(raw)
    assert [i["seq"] for i in page["items"]] == [1, 3, 4, 5, 6, 7, 8]
    assert page["items"][0]["payload"] == {"s": '[{\\"x'}
    assert page["next_cursor"] is None
    [bad] = page["unreadable"]
    assert bad["index"] == 1 and bad["raw"].startswith('{"seq": 2') and "RecursionError" in bad["error"]


def test_drain_hands_an_unreadable_item_to_its_callback_in_place(hub):
    server = hub(0)
    deep = "[" * 5000 + "]" * 5000

    class Deep(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            items = ['{"seq": 1, "ceId": "a", "payload": {}}', '{"seq": 2, "ceId": "b", "payload": ' + deep + "}",
                     '{"seq": 3, "ceId": "c", "payload": {}}']
            raw = ('{"items": [' + ",".join(items) + '], "next_cursor": null}').encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server.local.server.RequestHandlerClass = Deep
    consumer = PullConsumer(server.url, "key-1", "sub-1")
    order = []
    n = consumer.drain(lambda e: order.append(e["seq"]), lambda raw, err: order.append(("bad", raw[:9], err.split(":")[0])))
    assert n == 3
    assert order == [1, ("bad", '{"seq": 2', "RecursionError"), 3]

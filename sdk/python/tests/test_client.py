"""The API client's own layer against a local server: retries of 429 and 503 honouring
Retry-After, the typed error, and what each publishing mode sends."""

import base64
import json

import pytest

from local_server import LocalServer
from streaming_hub_client import Client, Event, HubError, new_id, retry_after


class Flaky:
    """Answers the first `refusals` requests with `status` (and Retry-After), then 202."""

    def __init__(self, refusals=0, status=429, after="0"):
        self.refusals, self.status, self.after = refusals, status, after
        self.requests = []
        self.local = LocalServer(self.handle)
        self.url = self.local.url

    def handle(self, request, body):
        self.requests.append((request.command, request.path, dict(request.headers), body))
        if len(self.requests) <= self.refusals:
            headers = [("Retry-After", self.after)] if self.after is not None else []
            refusal = {"code": self.status, "title": "rate_limited", "message": "slow down"}
            return request.answer(self.status, refusal, headers)
        if request.path.startswith("/v1/events"):
            return request.answer(202, {"verdict": "accepted", "seq": 1})
        request.answer(200, {"redriven": 0})

    def close(self):
        self.local.close()


@pytest.fixture
def flaky(request):
    server = Flaky(*getattr(request, "param", ()))
    yield server
    server.close()


def event(**kw):
    fields = dict(source="lender", resource_type="loan", event_type="approved", tenant_id="t1",
                  schema_version="1.0.0", data={"amount": 100})
    fields.update(kw)
    return Event(**fields)


@pytest.mark.parametrize("flaky", [(2, 429, "0")], indirect=True)
def test_a_retried_publish_sends_the_same_id_and_body(flaky):
    answer = Client(flaky.url, "k").publish(event())
    assert answer.verdict == "accepted"
    assert len(flaky.requests) == 3
    ids = {r[2]["ce-id"] for r in flaky.requests}
    assert len(ids) == 1 and {r[3] for r in flaky.requests} == {b'{"amount":100}'}
    assert {r[2]["Authorization"] for r in flaky.requests} == {"Bearer k"}


@pytest.mark.parametrize("flaky", [(1, 503, None)], indirect=True)
def test_a_503_is_retried_on_generated_operations_too(flaky):
    Client(flaky.url, "k").subscriptions.redrive_deliveries("01a23d6c-0843-7024-9ce1-4bf4179866b4", {})
    assert len(flaky.requests) == 2 and flaky.requests[0][3] == flaky.requests[1][3]


@pytest.mark.parametrize("flaky", [(100, 429, "0")], indirect=True)
def test_retries_stop_and_the_typed_error_is_raised(flaky):
    with pytest.raises(HubError) as raised:
        Client(flaky.url, "k", max_retries=2).publish(event())
    assert (raised.value.status, raised.value.title, raised.value.message) == (429, "rate_limited", "slow down")
    assert len(flaky.requests) == 3


@pytest.mark.parametrize("flaky", [(100, 429, "3600")], indirect=True)
def test_a_retry_after_beyond_max_wait_is_raised_not_waited(flaky):
    with pytest.raises(HubError):
        Client(flaky.url, "k", max_wait=1).publish(event())
    assert len(flaky.requests) == 1


def test_structured_mode_carries_every_attribute_and_the_data(flaky):
    hub = Client(flaky.url, "k")
    hub.publish_structured(event(subject="loan-7"))
    doc = json.loads(flaky.requests[0][3])
    assert flaky.requests[0][2]["Content-Type"] == "application/cloudevents+json"
    assert doc["type"] == "studio.lerian.lender.loan.approved" and doc["subject"] == "loan-7"
    assert doc["data"] == {"amount": 100} and doc["tenantid"] == "t1"
    hub.publish_structured(event(data=b"\x00\x01\x02", data_content_type="application/octet-stream"))
    assert json.loads(flaky.requests[1][3])["data_base64"] == base64.b64encode(b"\x00\x01\x02").decode()


def test_an_event_keeps_its_id_across_publishes():
    e = event()
    assert e.attributes()["id"] == e.id and e.attributes()["id"] == e.id
    assert new_id()[14] == "7", "a UUIDv7"


@pytest.mark.parametrize(
    "value,wait",
    [("3", 3.0), (" 0 ", 0.0), ("Thu, 03 Dec 2026 12:00:05 GMT", 5.0), ("Thu, 03 Dec 2026 11:00:00 GMT", 0.0),
     ("-1", None), ("soon", None), ("", None), (None, None)],
)
def test_retry_after(value, wait):
    now = 1796299200.0  # Thu, 03 Dec 2026 12:00:00 GMT
    assert retry_after(value, now) == wait


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="base_url"):
        Client("hub:8080", "k")
    with pytest.raises(ValueError, match="api_key"):
        Client("http://hub", "")

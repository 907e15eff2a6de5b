"""The API client against a live hub: the hub's test suite starts one and sets STREAMING_HUB_URL,
STREAMING_HUB_API_KEY (a tenant key of STREAMING_HUB_TENANT), STREAMING_HUB_ADMIN_KEY and
STREAMING_HUB_RECEIVER_URL (crates/streaming-hub/tests/it/clients.rs)."""

import os
import time

import pytest

from streaming_hub_api.models import (
    CreateApiKey,
    CreateSubscription,
    PullSink,
    ReplayRequest,
    Sink,
    WebhookSink,
)
from streaming_hub_client import Client, Event, HubError

URL = os.environ.get("STREAMING_HUB_URL")


def eventually(what, done, within=60.0):
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, f"{what}: not within {within} s"
        time.sleep(0.05)


@pytest.mark.skipif(not URL, reason="STREAMING_HUB_URL is not set: the hub's test suite runs this against a live hub")
def test_live():
    tenant, receiver = os.environ["STREAMING_HUB_TENANT"], os.environ["STREAMING_HUB_RECEIVER_URL"]
    hub = Client(URL, os.environ["STREAMING_HUB_API_KEY"])

    pull = hub.subscriptions.create_subscription(
        CreateSubscription(name="python pull", event_types=["loan.*"], sink=Sink(PullSink(type="pull")))
    )

    # 100 events, half in each mode; the hub's rate limit answers some of them 429 on the way.
    published = []
    for i in range(100):
        e = Event(source="lender", resource_type="loan", event_type="approved", tenant_id=tenant,
                  schema_version="1.0.0", data={"n": i})
        answer = hub.publish(e) if i % 2 == 0 else hub.publish_structured(e)
        assert answer.verdict == "accepted", f"event {i}"
        published.append(e.id)
    again = Event(source="lender", resource_type="loan", event_type="approved", tenant_id=tenant,
                  schema_version="1.0.0", data={"n": 0}, id=published[0])
    assert hub.publish(again).verdict == "duplicate"

    def read():
        ids = []
        hub.drain(pull.id, lambda item: ids.append(str(item.ce_id)), limit=30)
        return ids

    assert read() == published

    # A replay of the whole inbox gives every event to the subscription again.
    replay = hub.subscriptions.replay_subscription(pull.id, ReplayRequest(from_seq=1, include_delivered=True))
    eventually("the replay finishes",
               lambda: hub.subscriptions.get_replay(pull.id, replay.replay_id).state == "done")
    assert sorted(read()) == sorted(published)

    # A webhook: verified by the hub, then a delivery.
    hook = hub.subscriptions.create_subscription(
        CreateSubscription(name="python hook", event_types=["payment.*"], sink=Sink(WebhookSink(type="webhook", url=receiver)))
    )
    assert hook.signing_secret and hook.signing_secret.startswith("whsec_")
    eventually("the webhook is verified",
               lambda: hub.subscriptions.get_subscription(hook.id).verification_state == "active")
    payment = Event(source="ledger", resource_type="payment", event_type="settled", tenant_id=tenant,
                    schema_version="1.0.0", data={"amount": "10.00"})
    hub.publish(payment)
    eventually("the webhook's delivery", lambda: any(
        d.state == "succeeded" and str(d.ce_id) == payment.id for d in hub.subscriptions.list_deliveries(hook.id).items))
    assert hub.pause(hook.id).enabled is False
    assert hub.resume(hook.id).enabled is True

    # A field the hub refuses: a typed 422 naming it.
    with pytest.raises(HubError) as refused:
        hub.subscriptions.create_subscription(CreateSubscription(
            name="bad", event_types=["loan.*"],
            sink=Sink(WebhookSink(type="webhook", url="ftp://receiver.example.com/hook"))))
    assert (refused.value.status, refused.value.title) == (422, "validation_failed")
    assert "url" in refused.value.message

    # The admin routes, with an admin key.
    admin = Client(URL, os.environ["STREAMING_HUB_ADMIN_KEY"])
    tenants = {t.tenant_id: t for t in admin.admin.list_tenants().items}
    assert tenants[tenant].events >= 101, "101 events published, and the hub's own operational events"
    key = admin.admin.create_api_key(CreateApiKey(tenant_id=tenant, name="python client"))
    admin.admin.revoke_api_key(key.id)

    for sub in (pull.id, hook.id):
        hub.subscriptions.delete_subscription(sub)
    with pytest.raises(HubError) as gone:
        hub.subscriptions.get_subscription(hook.id)
    assert gone.value.status == 404

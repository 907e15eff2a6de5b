/**
 * The API client against a live hub: the hub's test suite starts one and sets STREAMING_HUB_URL,
 * STREAMING_HUB_API_KEY (a tenant key of STREAMING_HUB_TENANT), STREAMING_HUB_ADMIN_KEY and
 * STREAMING_HUB_RECEIVER_URL (crates/streaming-hub/tests/it/clients.rs).
 */
import { test } from "node:test";
import assert from "node:assert/strict";

import { HubClient, HubError, newId, type HubEvent } from "../src";

const URL = process.env.STREAMING_HUB_URL;

async function eventually(what: string, done: () => Promise<boolean>, withinMs = 60_000): Promise<void> {
  const deadline = Date.now() + withinMs;
  while (!(await done())) {
    assert.ok(Date.now() < deadline, `${what}: not within ${withinMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

test("live", { skip: URL ? false : "STREAMING_HUB_URL is not set: the hub's test suite runs this against a live hub" }, async () => {
  const tenant = process.env.STREAMING_HUB_TENANT ?? "";
  const receiver = process.env.STREAMING_HUB_RECEIVER_URL ?? "";
  const hub = new HubClient({ baseUrl: URL ?? "", apiKey: process.env.STREAMING_HUB_API_KEY ?? "" });

  const pull = await hub.subscriptions.createSubscription({
    createSubscription: { name: "typescript pull", eventTypes: ["loan.*"], sink: { type: "pull" } },
  });

  // 100 events, half in each mode; the hub's rate limit answers some of them 429 on the way.
  const published: string[] = [];
  for (let i = 0; i < 100; i++) {
    const e: HubEvent = { source: "lender", resourceType: "loan", eventType: "approved", tenantId: tenant,
      schemaVersion: "1.0.0", data: { n: i }, id: newId() };
    const answer = i % 2 === 0 ? await hub.publish(e) : await hub.publishStructured(e);
    assert.equal(answer.verdict, "accepted", `event ${i}`);
    published.push(e.id ?? "");
  }
  const again = await hub.publish({ source: "lender", resourceType: "loan", eventType: "approved", tenantId: tenant,
    schemaVersion: "1.0.0", data: { n: 0 }, id: published[0] });
  assert.equal(again.verdict, "duplicate");

  const read = async () => {
    const ids: string[] = [];
    await hub.drain(pull.id, (item) => { ids.push(item.ceId); }, 30);
    return ids;
  };
  assert.deepEqual(await read(), published);

  // A replay of the whole inbox gives every event to the subscription again.
  const replay = await hub.subscriptions.replaySubscription({ id: pull.id, replayRequest: { fromSeq: 1, includeDelivered: true } });
  await eventually("the replay finishes", async () =>
    (await hub.subscriptions.getReplay({ id: pull.id, replayId: replay.replayId })).state === "done");
  assert.deepEqual((await read()).sort(), [...published].sort());

  // A webhook: verified by the hub, then a delivery.
  const hook = await hub.subscriptions.createSubscription({
    createSubscription: { name: "typescript hook", eventTypes: ["payment.*"], sink: { type: "webhook", url: receiver } },
  });
  assert.ok(hook.signingSecret?.startsWith("whsec_"));
  await eventually("the webhook is verified", async () =>
    (await hub.subscriptions.getSubscription({ id: hook.id })).verificationState === "active");
  const payment: HubEvent = { source: "ledger", resourceType: "payment", eventType: "settled", tenantId: tenant,
    schemaVersion: "1.0.0", data: { amount: "10.00" }, id: newId() };
  await hub.publish(payment);
  await eventually("the webhook's delivery", async () =>
    (await hub.subscriptions.listDeliveries({ id: hook.id })).items.some((d) => d.state === "succeeded" && d.ceId === payment.id));
  assert.equal((await hub.pause(hook.id)).enabled, false);
  assert.equal((await hub.resume(hook.id)).enabled, true);

  // A field the hub refuses: a typed 422 naming it.
  await assert.rejects(
    hub.subscriptions.createSubscription({ createSubscription: { name: "bad", eventTypes: ["loan.*"],
      sink: { type: "webhook", url: "ftp://receiver.example.com/hook" } } }),
    (e: unknown) => e instanceof HubError && e.status === 422 && e.title === "validation_failed" && e.message.includes("url"),
  );

  // The admin routes, with an admin key.
  const admin = new HubClient({ baseUrl: URL ?? "", apiKey: process.env.STREAMING_HUB_ADMIN_KEY ?? "" });
  const tenants = await admin.admin.listTenants();
  const mine = tenants.items.find((t) => t.tenantId === tenant);
  assert.ok(mine && mine.events >= 101, "101 events published, and the hub's own operational events");
  const key = await admin.admin.createApiKey({ createApiKey: { tenantId: tenant, name: "typescript client" } });
  await admin.admin.revokeApiKey({ id: key.id });

  for (const id of [pull.id, hook.id]) await hub.subscriptions.deleteSubscription({ id });
  await assert.rejects(hub.subscriptions.getSubscription({ id: hook.id }), (e: unknown) => e instanceof HubError && e.status === 404);
});

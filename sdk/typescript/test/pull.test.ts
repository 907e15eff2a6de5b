import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

import { ApiError, PullConsumer, retryAfterMs } from "../src";

/** A server that answers like the hub's pull route. */
async function hub(events: number, limited = 0): Promise<{ url: string; requests: string[]; server: Server }> {
  let cursor = 0;
  const requests: string[] = [];
  const server = createServer((req, res) => {
    requests.push(req.url ?? "");
    const url = new URL(req.url ?? "/", "http://x");
    const answer = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { "Content-Type": "application/json", ...headers });
      res.end(JSON.stringify(body));
    };
    if (req.headers.authorization !== "Bearer key-1" || url.pathname !== "/v1/subscriptions/sub-1/events") {
      return answer(404, { code: 404, title: "not_found", message: "no such subscription" });
    }
    if (limited > 0) {
      limited--;
      return answer(429, { code: 429, title: "rate_limited", message: "slow down" }, { "Retry-After": "2" });
    }
    const limit = Number(url.searchParams.get("limit") ?? 100);
    const after = Number(url.searchParams.get("after") ?? cursor);
    const items = [];
    for (let s = after + 1; s <= events && items.length < limit; s++) items.push({ seq: s, ceId: `id-${s}`, payload: {} });
    if (items.length) cursor = Math.max(cursor, items[items.length - 1].seq);
    answer(200, { items, next_cursor: items.length === limit ? items[items.length - 1].seq : null });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests, server };
}

test("drain pages to the end and waits out rate limits", async () => {
  const h = await hub(25, 2);
  try {
    const slept: number[] = [];
    const consumer = new PullConsumer({
      baseUrl: `${h.url}/`,
      apiKey: "key-1",
      subscriptionId: "sub-1",
      limit: 10,
      sleep: async (ms) => {
        slept.push(ms);
      },
    });
    const seen: number[] = [];
    assert.equal(await consumer.drain((e) => void seen.push(e.seq)), 25);
    assert.deepEqual(seen, Array.from({ length: 25 }, (_, i) => i + 1));
    assert.deepEqual(slept, [2000, 2000]);
    assert.deepEqual(h.requests, [
      "/v1/subscriptions/sub-1/events?limit=10",
      "/v1/subscriptions/sub-1/events?limit=10",
      "/v1/subscriptions/sub-1/events?limit=10",
      "/v1/subscriptions/sub-1/events?after=10&limit=10",
      "/v1/subscriptions/sub-1/events?after=20&limit=10",
    ]);
  } finally {
    h.server.close();
  }
});

test("errors come in the hub's shape", async () => {
  const h = await hub(3);
  try {
    await assert.rejects(
      new PullConsumer({ baseUrl: h.url, apiKey: "key-1", subscriptionId: "other" }).nextPage(),
      (e: unknown) => e instanceof ApiError && e.code === 404 && e.title === "not_found",
    );
  } finally {
    h.server.close();
  }
});

test("Retry-After forms", () => {
  assert.equal(retryAfterMs("2"), 2000);
  assert.equal(retryAfterMs("0"), 100);
  assert.equal(retryAfterMs("3600", 5000), 5000);
  assert.equal(retryAfterMs("nonsense"), 1000);
  assert.equal(retryAfterMs(null), 1000);
  assert.equal(retryAfterMs("Wed, 21 Oct 2015 07:28:00 GMT"), 100);
});

test("an item that cannot be parsed is handed on in its place, never lost with its page", async () => {
  const body =
    '{"items": [{"seq": 1, "ceId": "a", "payload": {"s": "[{\\"x"}}, {"seq": 2, "ceId": "b", "payload": tru},' +
    ' {"seq": 3, "ceId": "c", "payload": [1, {"k": "]"}]}], "next_cursor": null}';
  const server = createServer((_req, res) => {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  try {
    const order: string[] = [];
    const consumer = new PullConsumer({
      baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      apiKey: "k",
      subscriptionId: "s",
      onUnreadable: (raw) => {
        order.push(`bad:${raw.slice(0, 9)}`);
      },
    });
    const n = await consumer.drain((e) => {
      order.push(e.ceId);
    });
    assert.equal(n, 3);
    assert.deepEqual(order, ["a", 'bad:{"seq": 2', "c"]);
  } finally {
    server.close();
  }
});

import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";

import { HubClient, HubError, newId, retryAfter, type HubEvent } from "../src";

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/** Answers the first `refusals` requests with `status` (and Retry-After), then 202 or 200. */
async function flaky(refusals: number, status = 429, after: string | null = "0") {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks).toString() });
      const answer = (code: number, body: unknown, headers: Record<string, string> = {}) => {
        res.writeHead(code, { "Content-Type": "application/json", ...headers });
        res.end(JSON.stringify(body));
      };
      if (seen.length <= refusals) {
        return answer(status, { code: status, title: "rate_limited", message: "slow down" }, after === null ? {} : { "Retry-After": after });
      }
      if ((req.url ?? "").startsWith("/v1/events")) return answer(202, { verdict: "accepted", seq: 1 });
      answer(200, { redriven: 0 });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, seen, close: () => server.close() };
}

const event = (more: Partial<HubEvent> = {}): HubEvent => ({
  source: "lender", resourceType: "loan", eventType: "approved", tenantId: "t1", schemaVersion: "1.0.0",
  data: { amount: 100 }, ...more,
});

test("a retried publish sends the same id and body", async () => {
  const server = await flaky(2);
  try {
    const answer = await new HubClient({ baseUrl: server.url, apiKey: "k" }).publish(event());
    assert.equal(answer.verdict, "accepted");
    assert.equal(server.seen.length, 3);
    assert.equal(new Set(server.seen.map((s) => s.headers["ce-id"])).size, 1);
    assert.deepEqual(new Set(server.seen.map((s) => s.body)), new Set(['{"amount":100}']));
    assert.deepEqual(new Set(server.seen.map((s) => s.headers.authorization)), new Set(["Bearer k"]));
  } finally {
    server.close();
  }
});

test("a 503 is retried on generated operations too", async () => {
  const server = await flaky(1, 503, null);
  try {
    await new HubClient({ baseUrl: server.url, apiKey: "k" }).subscriptions.redriveDeliveries({
      id: "01a23d6c-0843-7024-9ce1-4bf4179866b4", redriveRequest: {},
    });
    assert.equal(server.seen.length, 2);
    assert.equal(server.seen[0].body, server.seen[1].body);
  } finally {
    server.close();
  }
});

test("retries stop and the typed error is thrown", async () => {
  const server = await flaky(100);
  try {
    await assert.rejects(new HubClient({ baseUrl: server.url, apiKey: "k", maxRetries: 2 }).publish(event()), (e: unknown) =>
      e instanceof HubError && e.status === 429 && e.title === "rate_limited" && e.message === "slow down");
    assert.equal(server.seen.length, 3);
  } finally {
    server.close();
  }
});

test("a Retry-After beyond maxWaitMs is thrown, not waited for", async () => {
  const server = await flaky(100, 429, "3600");
  try {
    await assert.rejects(new HubClient({ baseUrl: server.url, apiKey: "k", maxWaitMs: 1000 }).publish(event()), HubError);
    assert.equal(server.seen.length, 1);
  } finally {
    server.close();
  }
});

test("structured mode carries every attribute and the data", async () => {
  const server = await flaky(0);
  try {
    const hub = new HubClient({ baseUrl: server.url, apiKey: "k" });
    await hub.publishStructured(event({ subject: "loan-7" }));
    const doc = JSON.parse(server.seen[0].body);
    assert.equal(server.seen[0].headers["content-type"], "application/cloudevents+json");
    assert.equal(doc.type, "studio.lerian.lender.loan.approved");
    assert.equal(doc.subject, "loan-7");
    assert.deepEqual(doc.data, { amount: 100 });
    await hub.publishStructured(event({ data: new Uint8Array([0, 1, 2]), dataContentType: "application/octet-stream" }));
    assert.equal(JSON.parse(server.seen[1].body).data_base64, "AAEC");
  } finally {
    server.close();
  }
});

test("newId is a UUIDv7", () => {
  assert.match(newId(), /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
});

test("retryAfter", () => {
  const now = Date.parse("2026-12-03T12:00:00Z");
  const cases: [string | null, number | null][] = [
    ["3", 3000], [" 0 ", 0], ["Thu, 03 Dec 2026 12:00:05 GMT", 5000], ["Thu, 03 Dec 2026 11:00:00 GMT", 0],
    ["-1", null], ["soon", null], ["", null], [null, null],
  ];
  for (const [value, wait] of cases) assert.equal(retryAfter(value, now), wait, String(value));
});

test("bad options are named", () => {
  assert.throws(() => new HubClient({ baseUrl: "hub:8080", apiKey: "k" }), /baseUrl/);
  assert.throws(() => new HubClient({ baseUrl: "http://hub", apiKey: "" }), /apiKey/);
});

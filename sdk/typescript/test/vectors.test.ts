import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { DEFAULT_TOLERANCE_SECONDS, InvalidDelivery, parseHeaders, sign, verify, verifyEd25519 } from "../src";

// Run from sdk/typescript (as `npm test` does): the shared vectors sit in sdk/vectors.
const VECTORS = JSON.parse(readFileSync(join(process.cwd(), "..", "vectors", "webhooks.json"), "utf8"));

type Headers = Record<string, string[]>;

function pairs(headers: Headers): [string, string][] {
  return Object.entries(headers).flatMap(([name, values]) => values.map((v): [string, string] => [name, v]));
}

test("the vectors hold cases and agree on the tolerance", () => {
  assert.ok(VECTORS.verify.length >= 20 && VECTORS.headers.length >= 10);
  assert.equal(VECTORS.tolerance_seconds, DEFAULT_TOLERANCE_SECONDS);
});

for (const c of VECTORS.verify) {
  for (const shape of ["pairs", "record of lists"]) {
    test(`verify: ${c.name} (${shape})`, () => {
      const headers = shape === "pairs" ? pairs(c.headers) : c.headers;
      const body = Buffer.from(c.body, "utf8");
      if (c.valid) {
        verify(c.secrets, headers, body, { now: c.now });
      } else {
        assert.throws(
          () => verify(c.secrets, headers, body, { now: c.now }),
          (e: unknown) => e instanceof InvalidDelivery && e.kind === c.error,
        );
      }
    });
  }
}

test("the vectors hold ed25519 cases", () => assert.ok(VECTORS.verify_ed25519.length >= 10));

for (const c of VECTORS.verify_ed25519) {
  test(`verifyEd25519: ${c.name}`, () => {
    const body = Buffer.from(c.body, "utf8");
    if (c.valid) {
      verifyEd25519(c.public_keys, pairs(c.headers), body, { now: c.now });
    } else {
      assert.throws(
        () => verifyEd25519(c.public_keys, pairs(c.headers), body, { now: c.now }),
        (e: unknown) => e instanceof InvalidDelivery && e.kind === c.error,
      );
    }
  });
}

for (const c of VECTORS.headers) {
  test(`parseHeaders: ${c.name}`, () => {
    if (c.error) {
      assert.throws(
        () => parseHeaders(pairs(c.headers)),
        (e: unknown) => e instanceof InvalidDelivery && e.kind === c.error && e.header === c.header,
      );
      return;
    }
    const d = parseHeaders(pairs(c.headers)) as unknown as Record<string, unknown>;
    const camel = (s: string) => s.replace(/_([a-z])/g, (_, l: string) => l.toUpperCase());
    const got = Object.fromEntries(Object.keys(c.delivery).map((k) => [k, d[camel(k)]]));
    assert.deepEqual(got, c.delivery);
    assert.equal(Object.keys(d).length, Object.keys(c.delivery).length);
  });
}

test("a fetch Headers object, with the two rotation signatures joined by it", () => {
  const h = new Headers();
  h.append("X-Webhook-Timestamp", "1700000000");
  h.append("X-Webhook-Signature", sign("new", 1700000000, "{}"));
  h.append("X-Webhook-Signature", sign("old", 1700000000, "{}"));
  verify(["old"], h, Buffer.from("{}"), { now: 1700000000 });
});

test("sign is the specification's vector", () => {
  assert.equal(
    sign("test-secret", 1700000000, '{"id":"123"}'),
    "v1,sha256=49d0851d6baa34655d12dfba153c748db08b84830d4cb01780d833956c59844c",
  );
});

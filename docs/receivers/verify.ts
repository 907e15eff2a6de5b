// Verify a Streaming Hub webhook (TypeScript, Node's crypto only).
//
// Pass the raw request body (a Buffer, before JSON.parse), the X-Webhook-Timestamp header, every
// X-Webhook-Signature header value (e.g. `req.headersDistinct['x-webhook-signature']` in Node;
// never split a joined string on commas), and every secret you currently accept.
import { createHmac, timingSafeEqual } from "node:crypto";

export function verify(
  secrets: string[],
  timestamp: string,
  body: Buffer,
  signatures: string[],
  now: number = Math.floor(Date.now() / 1000),
  tolerance = 300,
): boolean {
  if (!/^\d+$/.test(timestamp)) return false;
  const ts = Number(timestamp);
  if (Math.abs(now - ts) > tolerance) return false; // replay protection: 5 minutes
  for (const secret of secrets) {
    const hex = createHmac("sha256", secret).update(`v1:${ts}.`).update(body).digest("hex");
    const expected = Buffer.from(`v1,sha256=${hex}`);
    for (const received of signatures) {
      const got = Buffer.from(received.trim());
      if (got.length === expected.length && timingSafeEqual(got, expected)) return true;
    }
  }
  return false;
}

// Checks this file against the spec's test vector: tsc verify.ts && node verify.js
const sig = "v1,sha256=49d0851d6baa34655d12dfba153c748db08b84830d4cb01780d833956c59844c";
const body = Buffer.from('{"id":"123"}');
const checks: [boolean, boolean][] = [
  [verify(["test-secret"], "1700000000", body, [sig], 1700000000), true],
  [verify(["other", "test-secret"], "1700000000", body, ["v1,sha256=00", sig], 1700000100), true],
  [verify(["test-secret"], "1700000000", Buffer.concat([body, Buffer.from(" ")]), [sig], 1700000000), false],
  [verify(["wrong"], "1700000000", body, [sig], 1700000000), false],
  [verify(["test-secret"], "1700000000", body, [sig], 1700000301), false],
];
checks.forEach(([got, want], i) => {
  if (got !== want) throw new Error(`check ${i}: got ${got}, want ${want}`);
});
console.log("typescript: ok");

/**
 * Runs the package against a live hub's deliveries, for the hub's own test suite
 * (crates/streaming-hub/tests/it/sdk.rs): verifies and parses each captured delivery, refuses
 * each tampered one, drains a pull subscription, and prints what it saw as JSON.
 */
import { readFileSync } from "node:fs";

import { InvalidDelivery, PullConsumer, parseHeaders, verify } from "../src";

interface Captured {
  headers: Record<string, string[]>;
  body: string;
}

async function main(path: string): Promise<void> {
  const data = JSON.parse(readFileSync(path, "utf8"));
  const out = { verified: [] as string[], rejected: [] as string[], pulled: [] as string[] };
  for (const d of data.deliveries as Captured[]) {
    verify(data.secrets, d.headers, Buffer.from(d.body, "base64"));
    out.verified.push(parseHeaders(d.headers).eventId);
  }
  for (const d of data.tampered as Captured[]) {
    try {
      verify(data.secrets, d.headers, Buffer.from(d.body, "base64"));
    } catch (e) {
      if (!(e instanceof InvalidDelivery)) throw e;
      out.rejected.push(e.kind);
      continue;
    }
    throw new Error("a tampered delivery verified");
  }
  const consumer = new PullConsumer({
    baseUrl: data.pull.base_url,
    apiKey: data.pull.api_key,
    subscriptionId: data.pull.subscription_id,
    limit: 7,
  });
  await consumer.drain((e) => void out.pulled.push(e.ceId));
  console.log(JSON.stringify(out));
}

main(process.argv[2]).catch((e) => {
  console.error(e);
  process.exit(1);
});

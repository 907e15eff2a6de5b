import { createHmac, createPublicKey, timingSafeEqual, verify as verifySignature } from "node:crypto";

export const DEFAULT_TOLERANCE_SECONDS = 300;
export const VERIFICATION_EVENT_TYPE = "streaming_hub.verification";
const TIMESTAMP = "X-Webhook-Timestamp";
const SIGNATURE = "X-Webhook-Signature";
const STANDARD_TIMESTAMP = "webhook-timestamp";

export type ErrorKind =
  | "missing_header"
  | "malformed_header"
  | "timestamp_too_old"
  | "timestamp_too_new"
  | "no_matching_signature";

/** A refused delivery: why, and the header at fault. */
export class InvalidDelivery extends Error {
  constructor(
    readonly kind: ErrorKind,
    readonly header?: string,
  ) {
    super(header ? `${kind} (${header})` : kind);
    this.name = "InvalidDelivery";
  }
}

/**
 * Headers as frameworks hand them over: Node's `req.headers` or `req.headersDistinct`, a fetch
 * `Headers`, a plain record of strings or lists, or `[name, value]` pairs.
 */
export type HeadersLike =
  | { get(name: string): string | null; forEach(cb: (value: string, name: string) => void): void }
  | Record<string, string | string[] | undefined>
  | Iterable<[string, string]>;

function values(headers: HeadersLike, name: string): string[] {
  const lower = name.toLowerCase();
  const out: string[] = [];
  if (typeof (headers as { get?: unknown }).get === "function" && typeof (headers as { forEach?: unknown }).forEach === "function") {
    const v = (headers as { get(name: string): string | null }).get(name);
    return v === null ? [] : [v];
  }
  const entries: Iterable<[string, unknown]> =
    Symbol.iterator in (headers as object)
      ? (headers as Iterable<[string, string]>)
      : Object.entries(headers as Record<string, unknown>);
  for (const [key, value] of entries) {
    if (key.toLowerCase() !== lower || value === undefined) continue;
    if (Array.isArray(value)) out.push(...value.map(String));
    else out.push(String(value));
  }
  return out;
}

function single(headers: HeadersLike, name: string): string {
  const v = values(headers, name);
  if (v.length === 0) throw new InvalidDelivery("missing_header", name);
  if (v.length > 1 || v[0] === "") throw new InvalidDelivery("malformed_header", name);
  return v[0];
}

function optional(headers: HeadersLike, name: string): string | null {
  const v = values(headers, name);
  if (v.length > 1) throw new InvalidDelivery("malformed_header", name);
  return v.length ? v[0] : null;
}

function unsigned(raw: string): number | null {
  return /^[0-9]+$/.test(raw) ? Number(raw) : null;
}

function mac(secret: string, timestamp: string, body: Uint8Array): Buffer {
  return createHmac("sha256", Buffer.from(secret, "utf8"))
    .update(`v1:${timestamp}.`)
    .update(body)
    .digest();
}

/** The `X-Webhook-Signature` value the hub sends; for tests of a receiver. */
export function sign(secret: string, timestamp: number, body: Uint8Array | string): string {
  const bytes = typeof body === "string" ? Buffer.from(body, "utf8") : body;
  return `v1,sha256=${mac(secret, String(timestamp), bytes).toString("hex")}`;
}

/** Every `v1,sha256=<hex>` in the values, which a framework may have joined with commas. */
function candidates(vals: string[]): Buffer[] {
  const out: Buffer[] = [];
  for (const value of vals) {
    const tokens = value.split(",").map((t) => t.trim());
    for (let i = 0; i + 1 < tokens.length; i++) {
      if (tokens[i] !== "v1" || !tokens[i + 1].startsWith("sha256=")) continue;
      const hex = tokens[i + 1].slice("sha256=".length);
      if (/^[0-9a-fA-F]{64}$/.test(hex)) out.push(Buffer.from(hex, "hex"));
    }
  }
  return out;
}

function withinTolerance(timestamp: number, now: number | undefined, tolerance: number, header: string): void {
  const age = Math.floor(now ?? Date.now() / 1000) - timestamp;
  if (age > tolerance) throw new InvalidDelivery("timestamp_too_old", header);
  if (-age > tolerance) throw new InvalidDelivery("timestamp_too_new", header);
}

export interface VerifyOptions {
  /** Unix seconds; default now. */
  now?: number;
  /** Seconds a timestamp may be from now; default 300. */
  toleranceSeconds?: number;
}

/**
 * Checks a delivery on its raw body; throws InvalidDelivery when it must be refused. `secrets`
 * are every signing secret you accept (both during a rotation), exactly as the API showed them.
 */
export function verify(
  secrets: string | string[],
  headers: HeadersLike,
  body: Uint8Array,
  options: VerifyOptions = {},
): void {
  if (typeof body === "string") throw new TypeError("verify the raw body bytes, not a decoded string");
  const accepted = typeof secrets === "string" ? [secrets] : secrets;
  const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  const raw = single(headers, TIMESTAMP);
  const timestamp = unsigned(raw);
  if (timestamp === null) throw new InvalidDelivery("malformed_header", TIMESTAMP);
  const signatures = values(headers, SIGNATURE);
  if (signatures.length === 0) throw new InvalidDelivery("missing_header", SIGNATURE);
  withinTolerance(timestamp, options.now, tolerance, TIMESTAMP);
  const found = candidates(signatures);
  for (const secret of accepted) {
    const expected = mac(secret, raw, body);
    if (found.some((c) => c.length === expected.length && timingSafeEqual(c, expected))) return;
  }
  throw new InvalidDelivery("no_matching_signature", SIGNATURE);
}

const WEBHOOK_ID = "webhook-id";
const WEBHOOK_SIGNATURE = "webhook-signature";

/**
 * Checks a delivery of an ed25519 webhook (`sink.signature` `"ed25519"`) on its raw body; throws
 * InvalidDelivery when it must be refused. `publicKeys` are the subscription's public keys you
 * accept (`whpk_…`, as the API showed them; both during a rotation). One `v1a,<base64>` value of
 * `webhook-signature` (space-separated) must be an ed25519 signature of `{id}.{timestamp}.{body}`.
 */
export function verifyEd25519(
  publicKeys: string | string[],
  headers: HeadersLike,
  body: Uint8Array,
  options: VerifyOptions = {},
): void {
  if (typeof body === "string") throw new TypeError("verify the raw body bytes, not a decoded string");
  const accepted = typeof publicKeys === "string" ? [publicKeys] : publicKeys;
  const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  const id = single(headers, WEBHOOK_ID);
  const raw = single(headers, STANDARD_TIMESTAMP);
  const timestamp = unsigned(raw);
  if (timestamp === null) throw new InvalidDelivery("malformed_header", STANDARD_TIMESTAMP);
  const signatures = values(headers, WEBHOOK_SIGNATURE);
  if (signatures.length === 0) throw new InvalidDelivery("missing_header", WEBHOOK_SIGNATURE);
  withinTolerance(timestamp, options.now, tolerance, STANDARD_TIMESTAMP);
  const message = Buffer.concat([Buffer.from(`${id}.${raw}.`, "utf8"), body]);
  const keys = accepted.flatMap((k) => {
    const bytes = Buffer.from(k.replace(/^whpk_/, ""), "base64");
    if (bytes.length !== 32) return [];
    try {
      return [createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: bytes.toString("base64url") }, format: "jwk" })];
    } catch {
      return [];
    }
  });
  for (const token of signatures.flatMap((v) => v.split(" "))) {
    if (!token.startsWith("v1a,")) continue;
    const encoded = token.slice(4);
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) continue;
    const signature = Buffer.from(encoded, "base64");
    if (signature.length !== 64) continue;
    if (keys.some((key) => verifySignature(null, message, key, signature))) return;
  }
  throw new InvalidDelivery("no_matching_signature", WEBHOOK_SIGNATURE);
}

/** What the hub's headers say about one delivery. */
export interface Delivery {
  /** The CloudEvents id: the same on every redelivery. Deduplicate by it. */
  eventId: string;
  /** New for every attempt. */
  deliveryId: string;
  /** The event key `<resourcetype>.<eventtype>`. */
  eventType: string;
  tenantId: string;
  subscriptionId: string;
  attempt: number;
  schemaVersion: string | null;
  eventTime: string | null;
  subject: string | null;
  traceparent: string | null;
  tracestate: string | null;
  /** The attempt's Unix time in seconds. */
  timestamp: number;
  /** The hub's verification probe: answer 2xx with a body containing its challenge. */
  isVerification: boolean;
}

/** Reads the `X-Lerian-*` headers and the timestamp. Verifies nothing: call verify first. */
export function parseHeaders(headers: HeadersLike): Delivery {
  const eventId = single(headers, "X-Lerian-Event-Id");
  const deliveryId = single(headers, "X-Lerian-Delivery-Id");
  const eventType = single(headers, "X-Lerian-Event-Type");
  const tenantId = single(headers, "X-Lerian-Tenant-Id");
  const subscriptionId = single(headers, "X-Lerian-Subscription-Id");
  const attempt = unsigned(single(headers, "X-Lerian-Attempt"));
  if (attempt === null || attempt < 1) throw new InvalidDelivery("malformed_header", "X-Lerian-Attempt");
  const timestampHeader =
    values(headers, TIMESTAMP).length === 0 && values(headers, STANDARD_TIMESTAMP).length > 0
      ? STANDARD_TIMESTAMP
      : TIMESTAMP;
  let rawTimestamp: string;
  try {
    rawTimestamp = single(headers, timestampHeader);
  } catch (e) {
    throw e instanceof InvalidDelivery ? new InvalidDelivery(e.kind, TIMESTAMP) : e;
  }
  const timestamp = unsigned(rawTimestamp);
  if (timestamp === null) throw new InvalidDelivery("malformed_header", TIMESTAMP);
  return {
    eventId,
    deliveryId,
    eventType,
    tenantId,
    subscriptionId,
    attempt,
    schemaVersion: optional(headers, "X-Lerian-Schema-Version"),
    eventTime: optional(headers, "X-Lerian-Event-Time"),
    subject: optional(headers, "X-Lerian-Subject"),
    traceparent: optional(headers, "traceparent"),
    tracestate: optional(headers, "tracestate"),
    timestamp,
    isVerification: eventType === VERIFICATION_EVENT_TYPE,
  };
}

/** One pulled event. */
export interface PulledEvent {
  seq: number;
  /** The CloudEvents id: deduplicate by it. */
  ceId: string;
  /** The event key `<resourcetype>.<eventtype>`. */
  type: string;
  source: string;
  time: string;
  schemaVersion: string;
  subject: string | null;
  dataContentType: string;
  /** JSON as received, or a string (base64 when `payloadEncoding` is "base64"). */
  payload: unknown;
  payloadEncoding?: string;
}

export interface Page {
  items: PulledEvent[];
  /** The seq to read after, for a full page; null when caught up. */
  next_cursor: number | null;
}

/** An answer in the hub's error shape. */
export class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly title: string,
    readonly detail: string,
  ) {
    super(`${code} ${title}: ${detail}`);
    this.name = "ApiError";
  }
}

/** A Retry-After of seconds or an HTTP date, in milliseconds; at least 100, at most `ceilingMs`. */
export function retryAfterMs(raw: string | null, ceilingMs = 30_000): number {
  let wait = 1000;
  if (raw !== null && raw.trim() !== "") {
    const seconds = Number(raw.trim());
    if (Number.isFinite(seconds)) wait = seconds * 1000;
    else {
      const at = Date.parse(raw);
      if (!Number.isNaN(at)) wait = at - Date.now();
    }
  }
  return Math.min(Math.max(wait, 100), ceilingMs);
}

export interface PullOptions {
  /** The hub's address, such as https://hub.example.com. */
  baseUrl: string;
  apiKey: string;
  subscriptionId: string;
  /** Page size, 1 to 1000; default the hub's. */
  limit?: number;
  /** Cap of one Retry-After wait, in ms; default 30 000. */
  maxWaitMs?: number;
  /** How to wait; replaceable in tests. */
  sleep?: (ms: number) => Promise<void>;
  fetch?: typeof fetch;
}

/**
 * Reads a pull subscription. Reading is the acknowledgement: a returned page moves the
 * subscription's durable cursor past it, so store what a page holds before reading on.
 */
export class PullConsumer {
  private next: number | null = null;

  constructor(private readonly options: PullOptions) {}

  /** One page, waiting out 429 answers as their Retry-After says. */
  async nextPage(): Promise<Page> {
    const o = this.options;
    const sleep = o.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
    const doFetch = o.fetch ?? fetch;
    for (;;) {
      const url = new URL(
        `${o.baseUrl.replace(/\/+$/, "")}/v1/subscriptions/${encodeURIComponent(o.subscriptionId)}/events`,
      );
      if (this.next !== null) url.searchParams.set("after", String(this.next));
      if (o.limit) url.searchParams.set("limit", String(o.limit));
      const response = await doFetch(url, {
        headers: { Authorization: `Bearer ${o.apiKey}`, Accept: "application/json" },
      });
      const text = await response.text();
      if (response.status === 429) {
        await sleep(retryAfterMs(response.headers.get("retry-after"), o.maxWaitMs));
        continue;
      }
      if (response.status !== 200) {
        let shape: { code?: unknown; title?: unknown; message?: unknown } = {};
        try {
          shape = JSON.parse(text);
        } catch {
          // not the error shape
        }
        if (typeof shape.title === "string") {
          throw new ApiError(Number(shape.code ?? response.status), shape.title, String(shape.message ?? ""));
        }
        throw new ApiError(response.status, "unexpected_answer", text.trim());
      }
      const page = JSON.parse(text) as Page;
      this.next = page.next_cursor;
      return page;
    }
  }

  /** Reads pages until a short one (caught up), handing each event to `handle` in seq order. */
  async drain(handle: (event: PulledEvent) => void | Promise<void>): Promise<number> {
    let read = 0;
    for (;;) {
      const page = await this.nextPage();
      for (const event of page.items) {
        read++;
        await handle(event);
      }
      if (page.next_cursor === null) return read;
    }
  }
}

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
  /**
   * Items that could not be parsed, with their raw text and their place among the page's
   * items: reading acknowledged them, so they are handed on rather than lost with the page.
   */
  unreadable?: UnreadableItem[];
}

/** A pulled item that could not be parsed. */
export interface UnreadableItem {
  index: number;
  raw: string;
  error: string;
}

const WS = " \t\r\n";

/** The index just past the JSON value that starts at text[i]: a scan, never a recursion. */
function valueEnd(text: string, i: number): number {
  if (i < text.length && !'[{"'.includes(text[i])) {
    while (i < text.length && !(",]}" + WS).includes(text[i])) i++;
    return i;
  }
  let depth = 0;
  let inString = false;
  let escaped = false;
  for (; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (escaped) escaped = false;
      else if (c === "\\") escaped = true;
      else if (c === '"') {
        inString = false;
        if (depth === 0) return i + 1;
      }
    } else if (c === '"') inString = true;
    else if (c === "[" || c === "{") depth++;
    else if (c === "]" || c === "}") {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  throw new Error("the page ends inside a value");
}

function skip(text: string, i: number, also = ""): number {
  while (i < text.length && (WS.includes(text[i]) || also.includes(text[i]))) i++;
  return i;
}

/** A page's items as raw JSON texts, and its next_cursor, found without parsing the items. */
export function splitPage(text: string): { items: string[]; cursor: number | null } {
  const items: string[] = [];
  let cursor: number | null = null;
  let i = skip(text, 0);
  if (text[i] !== "{") throw new Error("a page is a JSON object");
  i++;
  for (;;) {
    i = skip(text, i, ",");
    if (i >= text.length || text[i] === "}") return { items, cursor };
    let end = valueEnd(text, i);
    const key = JSON.parse(text.slice(i, end));
    i = skip(text, end);
    if (text[i] !== ":") throw new Error("a page member has no value");
    i = skip(text, i + 1);
    end = valueEnd(text, i);
    if (key === "items" && text[i] === "[") {
      for (let j = i + 1; ; ) {
        j = skip(text, j, ",");
        if (j >= end - 1) break;
        const itemEnd = valueEnd(text, j);
        items.push(text.slice(j, itemEnd));
        j = itemEnd;
      }
    } else if (key === "next_cursor") cursor = JSON.parse(text.slice(i, end));
    i = end;
  }
}

/** Reads a page; when it does not parse whole, each item is parsed on its own. */
export function parsePage(text: string): Page {
  try {
    return JSON.parse(text) as Page;
  } catch {
    // An item that cannot be parsed: find each one and keep the rest.
  }
  const { items, cursor } = splitPage(text);
  const page: Page = { items: [], next_cursor: cursor, unreadable: [] };
  items.forEach((raw, index) => {
    try {
      page.items.push(JSON.parse(raw) as PulledEvent);
    } catch (e) {
      page.unreadable?.push({ index, raw, error: String(e) });
    }
  });
  return page;
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
  /** Receives, in its place, each item `drain` could not parse; default: logged with console.error. */
  onUnreadable?: (raw: string, error: string) => void | Promise<void>;
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
      const page = parsePage(text);
      this.next = page.next_cursor;
      return page;
    }
  }

  /** Reads pages until a short one (caught up), handing each event to `handle` in seq order. */
  async drain(handle: (event: PulledEvent) => void | Promise<void>): Promise<number> {
    let read = 0;
    for (;;) {
      const page = await this.nextPage();
      const bad = new Map((page.unreadable ?? []).map((u) => [u.index, u]));
      const onUnreadable =
        this.options.onUnreadable ??
        ((raw: string, error: string) =>
          console.error(`streaming hub: a pulled item could not be parsed (${error}); its raw text is ${raw.length} characters`));
      let good = 0;
      for (let index = 0; index < page.items.length + bad.size; index++) {
        read++;
        const u = bad.get(index);
        if (u) await onUnreadable(u.raw, u.error);
        else await handle(page.items[good++]);
      }
      if (page.next_cursor === null) return read;
    }
  }
}

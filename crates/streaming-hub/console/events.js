// Streaming Hub console: the event log (search, one event with its deliveries), quarantine and
// the DLQ plane. Loaded before console.js, whose helpers (h, api, table, …) it calls only at
// run time.
"use strict";

const EVENT_COLUMNS = [
  { title: "Seq", cell: (e) => e.seq },
  { title: "Event", cell: (e) => link(`#/events/${e.ce_id}`, e.ce_id, `event-${e.ce_id}`) },
  { title: "Key", cell: (e) => e.type },
  { title: "Source", cell: (e) => e.source },
  { title: "Received", cell: (e) => time(e.received_at) },
];

/** The event log's search, kept in the address (`#/events?type=…&source=…&since=…&until=…`). */
function eventQuery() {
  const q = new URLSearchParams((location.hash.split("?")[1]) || "");
  return { type: q.get("type") || "", source: q.get("source") || "", since: q.get("since") || "", until: q.get("until") || "" };
}

function eventSearchForm(query, types) {
  const input = (id, label, value, attrs) => [
    h("label", { for: id }, label),
    h("input", { id, name: id, value, testid: id, ...attrs }),
  ];
  const known = h("datalist", { id: "search-types" }, types.map((t) => h("option", { value: t.type, label: t.description || "" })));
  const form = h(
    "form",
    { class: "inline search", testid: "event-search", role: "search", "aria-label": "Search the event log" },
    input("search-type", "Type", query.type, { list: "search-types", placeholder: "account.*" }),
    known,
    input("search-source", "Producer", query.source, { placeholder: "ledger" }),
    input("search-since", "Since", query.since, { placeholder: "2026-12-01T00:00:00Z" }),
    input("search-until", "Until", query.until, { placeholder: "2026-12-02T00:00:00Z" }),
    h("button", { type: "submit", testid: "search-submit" }, "Search"),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [k, id] of [["type", "search-type"], ["source", "search-source"], ["since", "search-since"], ["until", "search-until"]]) {
      const v = document.getElementById(id).value.trim();
      if (v) q.set(k, v);
    }
    go(`#/events${q.toString() ? `?${q}` : ""}`);
  });
  const idInput = h("input", { id: "search-id", name: "ce_id", testid: "search-id", placeholder: "01a2…", size: 38 });
  const byId = h(
    "form",
    { class: "inline", testid: "event-by-id", role: "search", "aria-label": "Find an event by its id" },
    h("label", { for: "search-id" }, "Event id (ce-id)"),
    idInput,
    h("button", { type: "submit", testid: "search-id-submit" }, "Open"),
  );
  byId.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (idInput.value.trim()) go(`#/events/${encodeURIComponent(idInput.value.trim())}`);
  });
  return [form, byId];
}

async function eventsView() {
  // Oldest first, a page at a time, narrowed by the search in the address.
  const query = eventQuery();
  const params = new URLSearchParams({ limit: "100" });
  if (query.type) params.set("event_type", query.type);
  if (query.source) params.set("source", query.source);
  if (query.since) params.set("since", query.since);
  if (query.until) params.set("until", query.until);
  const [page, catalog] = await Promise.all([api(`/v1/events?${params}`), api("/v1/event-types")]);
  const holder = h("div", {}, table("events", EVENT_COLUMNS, page.items));
  let cursor = page.next_cursor;
  const more = h("button", { type: "button", testid: "events-more", hidden: !cursor, onclick: async () => {
    params.set("after", cursor);
    const next = await api(`/v1/events?${params}`);
    const body = holder.querySelector("tbody");
    for (const row of table("events", EVENT_COLUMNS, next.items).querySelectorAll("tbody tr")) body.append(row);
    cursor = next.next_cursor;
    more.hidden = !cursor;
  } }, "More");
  show(h("h1", {}, "Event log"), ...eventSearchForm(query, catalog.items), holder, more);
}

async function eventView(ceId) {
  const d = await api(`/v1/events/${ceId}`);
  const e = d.event;
  show(
    h("h1", {}, `Event ${e.ce_id}`),
    h("p", {}, `${e.type} from ${e.source}, seq ${e.seq}, received ${time(e.received_at)}`),
    h("pre", { class: "payload", testid: "payload" }, typeof e.payload === "string" ? e.payload : JSON.stringify(e.payload, null, 2)),
    h("h2", {}, "Fan-out"),
    table(
      "fanout",
      [
        { title: "Subscription", cell: (o) => link(`#/subscriptions/${o.subscription_id}`, o.name) },
        { title: "Sink", cell: (o) => o.sink },
        { title: "State", cell: (o) => h("span", { class: `state ${o.state}` }, o.state) },
        { title: "Attempts", cell: (o) => o.deliveries.map(attemptsList) },
      ],
      d.subscriptions,
    ),
  );
}

async function quarantineView() {
  const page = await api("/admin/quarantine?limit=200");
  show(
    h("h1", {}, "Quarantine"),
    table(
      "quarantine",
      [
        { title: "Id", cell: (q) => q.id },
        { title: "Tenant", cell: (q) => q.tenant_id || "—" },
        { title: "Source", cell: (q) => q.source || "—" },
        { title: "Reason", cell: (q) => `${q.reason_code} (${q.reason_field}): ${q.reason}` },
        { title: "Received", cell: (q) => time(q.received_at) },
      ],
      page.items,
    ),
  );
}

async function dlqView() {
  const page = await api("/admin/dlq?limit=200");
  show(
    h("h1", {}, "DLQ records"),
    table(
      "dlq",
      [
        { title: "Topic", cell: (r) => `${r.topic} [${r.partition}] @${r.offset}` },
        { title: "Tenant", cell: (r) => r.tenant_id || "—" },
        { title: "Event", cell: (r) => r.ce_id || "—" },
        { title: "Error", cell: (r) => `${r.error_class || ""} ${r.error_message || ""}` },
      ],
      page.items,
    ),
  );
}

// Streaming Hub console: one page over the hub's own API.
//
// It signs in with the admin token (every tenant: the /admin listings, and a tenant's views by
// acting for it with the X-Streaming-Hub-Tenant header) or a tenant API key (that tenant only).
// The token stays in this tab's session storage. Every value is rendered as text, never markup.
"use strict";

const store = window.sessionStorage;
const state = {
  token: store.getItem("sh.token"),
  role: store.getItem("sh.role"), // "admin" or "tenant"
  tenant: store.getItem("sh.tenant"), // the tenant an admin acts for
  // A portal session (opened from a one-time URL): its tenant, scope and end.
  portal: JSON.parse(store.getItem("sh.portal") || "null"),
};

/** A read-only portal session: nothing that changes anything is offered. */
function readOnly() {
  return Boolean(state.portal && state.portal.scope === "read");
}

// ---------- DOM helpers (text only) ----------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "testid") el.dataset.testid = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function show(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes);
}

function notice(text, kind) {
  const n = h("p", { class: `notice ${kind || ""}`, role: kind === "error" ? "alert" : "status", testid: "notice" }, text);
  document.getElementById("main").prepend(n);
  return n;
}

function time(t) {
  return t ? new Date(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "—";
}

function table(testid, columns, rows, rowAttrs) {
  return h(
    "table",
    { testid },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c.title)))),
    h(
      "tbody",
      {},
      rows.length === 0
        ? h("tr", {}, h("td", { colspan: columns.length, class: "empty" }, "Nothing here."))
        : rows.map((r) => h("tr", rowAttrs ? rowAttrs(r) : {}, columns.map((c) => h("td", {}, c.cell(r))))),
    ),
  );
}

function link(href, text, testid) {
  return h("a", { href, testid }, text);
}

// ---------- API ----------

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(path, { method = "GET", body, token = state.token, asTenant = true } = {}) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (asTenant && state.role === "admin" && state.tenant && path.startsWith("/v1/")) {
    // Any tenant id, whatever its characters: a header carries ASCII only (RFC 8187's form).
    headers["X-Streaming-Hub-Tenant"] = "utf-8''" + encodeURIComponent(state.tenant);
  }
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  const json = text ? JSON.parse(text) : null;
  if (!res.ok) throw new ApiError(res.status, json);
  return json;
}

// ---------- Sign-in ----------

async function signIn(token) {
  // The admin token reads /admin; a tenant key reads its own /v1.
  try {
    await api("/admin/tenants", { token, asTenant: false });
    return "admin";
  } catch (e) {
    if (e.status !== 401 && e.status !== 403) throw e;
  }
  try {
    await api("/v1/subscriptions?limit=1", { token, asTenant: false });
    return "tenant";
  } catch (e) {
    if (e.status === 401 || e.status === 403) return null;
    throw e;
  }
}

function signInView() {
  const input = h("input", { type: "password", id: "token", name: "token", autocomplete: "off", required: true, testid: "token" });
  const form = h(
    "form",
    { class: "signin", testid: "signin" },
    h("h1", {}, "Sign in"),
    h("p", {}, "With the admin token (every tenant) or a tenant API key (that tenant only)."),
    h("label", { for: "token" }, "Token or API key"),
    input,
    h("button", { type: "submit", testid: "signin-submit" }, "Sign in"),
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const role = await signIn(input.value.trim());
      if (!role) return notice("That token or key was not accepted.", "error");
      state.token = input.value.trim();
      state.role = role;
      state.tenant = null;
      store.setItem("sh.token", state.token);
      store.setItem("sh.role", role);
      store.removeItem("sh.tenant");
      go(role === "admin" ? "#/tenants" : "#/subscriptions");
    } catch (e) {
      notice(`Sign-in failed: ${e.message}`, "error");
    }
  });
  show(form);
  input.focus();
}

function forget() {
  store.clear();
  state.token = state.role = state.tenant = state.portal = null;
}

function signOut() {
  forget();
  go("#/signin");
}

// ---------- Portal sessions ----------

/** Exchanges a one-time grant (from the URL's fragment, never sent to a server) for a session. */
async function openPortal(grant) {
  // The grant leaves the address bar (and the history) at once: it is spent either way.
  history.replaceState(null, "", "#/subscriptions");
  try {
    const r = await api("/v1/portal-sessions/exchange", { method: "POST", body: { grant }, token: null });
    store.clear();
    state.token = r.token;
    state.role = "tenant";
    state.tenant = null;
    state.portal = { tenant: r.tenant_id, scope: r.scope, expires_at: r.expires_at };
    store.setItem("sh.token", state.token);
    store.setItem("sh.role", state.role);
    store.setItem("sh.portal", JSON.stringify(state.portal));
    // Called while rendering: the subscriptions view is rendered here, not queued behind itself.
    return render();
  } catch (e) {
    chrome();
    show(h("h1", {}, "This portal link cannot be opened"), h("p", {}, "Ask for a new one: a link works once, and only until it expires."));
    notice(e.message, "error");
  }
}

function sessionEnded() {
  const ended = state.portal;
  store.clear();
  state.token = state.role = state.tenant = state.portal = null;
  chrome();
  show(
    h("h1", { testid: "session-ended" }, "This portal session has ended"),
    h("p", {}, `It expired or was revoked${ended ? ` (it was open until ${time(ended.expires_at)})` : ""}. Open the portal again from where you came.`),
  );
}

function actFor(tenant) {
  state.tenant = tenant;
  if (tenant) store.setItem("sh.tenant", tenant);
  else store.removeItem("sh.tenant");
}

function chrome() {
  const nav = document.getElementById("nav");
  const who = document.getElementById("who");
  const out = document.getElementById("signout");
  out.hidden = !state.token || Boolean(state.portal);
  out.onclick = signOut;
  const links = [];
  if (state.role === "admin") {
    links.push(link("#/tenants", "Tenants", "nav-tenants"));
    links.push(link("#/all-subscriptions", "All subscriptions", "nav-all-subscriptions"));
    links.push(link("#/quarantine", "Quarantine", "nav-quarantine"));
    links.push(link("#/dlq", "DLQ", "nav-dlq"));
    links.push(link("#/catalog", "Catalog", "nav-catalog"));
  }
  if (state.role === "tenant" || state.tenant) {
    links.push(link("#/subscriptions", "Subscriptions", "nav-subscriptions"));
    links.push(link("#/events", "Event log", "nav-events"));
    links.push(link("#/event-types", "Event types", "nav-event-types"));
  }
  nav.replaceChildren(...links);
  if (!state.token) who.textContent = "";
  else if (state.portal) who.textContent = `${state.portal.tenant} · ${state.portal.scope === "read" ? "read-only" : "manage"} portal until ${time(state.portal.expires_at)}`;
  else if (state.role === "admin") who.textContent = state.tenant ? `admin · acting for ${state.tenant}` : "admin · all tenants";
  else who.textContent = "tenant API key";
}

// ---------- Views ----------

async function tenantsView() {
  // Back to every tenant: no longer acting for one.
  actFor(null);
  chrome();
  const page = await api("/admin/tenants");
  show(
    h("h1", {}, "Tenants"),
    table(
      "tenants",
      [
        { title: "Tenant", cell: (t) => h("button", { type: "button", class: "linkish", testid: `tenant-${t.tenant_id}`, onclick: () => { actFor(t.tenant_id); go("#/subscriptions"); } }, t.tenant_id) },
        { title: "Events", cell: (t) => t.events },
        { title: "Subscriptions", cell: (t) => t.subscriptions },
        { title: "API keys", cell: (t) => t.api_keys },
        { title: "Pending", cell: (t) => t.jobs.pending },
        { title: "Leased", cell: (t) => t.jobs.leased },
        { title: "Held", cell: (t) => t.jobs.held },
        { title: "Dead", cell: (t) => t.jobs.dead },
      ],
      page.items,
    ),
  );
}

// The columns every subscription listing shows: its state and health.
function healthCells() {
  return [
    { title: "Verification", cell: (x) => h("span", { class: `state ${x.verification_state}` }, x.verification_state) },
    { title: "Enabled", cell: (x) => (x.enabled ? "yes" : `no${x.disabled_reason ? ` (${x.disabled_reason})` : ""}`) },
    { title: "Breaker", cell: (x) => (x.health ? x.health.breaker : "—") },
    {
      title: "In flight / allowance",
      cell: (x) => {
        const d = x.health && x.health.delivery;
        if (!d) return "—";
        const paused = d.paused_until ? ` (paused until ${d.paused_until})` : "";
        return `${d.in_flight} / ${d.allowance ?? "—"}${paused}`;
      },
    },
    { title: "Failing since", cell: (x) => time(x.health && x.health.failing_since) },
    { title: "Held jobs", cell: (x) => (x.health ? x.health.jobs.held : "—") },
    { title: "Dead jobs", cell: (x) => (x.health ? x.health.jobs.dead : "—") },
  ];
}

/**
 * A table read a page at a time (`next_cursor`): the first page now, the next with "More", so a
 * tenant with thousands of subscriptions is never loaded whole.
 */
async function pagedTable(testid, path, columns, rowAttrs) {
  const sep = path.includes("?") ? "&" : "?";
  const first = await api(`${path}${sep}limit=100`);
  const t = table(testid, columns, first.items, rowAttrs);
  let cursor = first.next_cursor;
  const more = h("button", { type: "button", testid: `${testid}-more`, hidden: !cursor, onclick: async () => {
    const next = await api(`${path}${sep}limit=100&cursor=${encodeURIComponent(cursor)}`);
    const body = t.querySelector("tbody");
    for (const row of table(testid, columns, next.items, rowAttrs).querySelectorAll("tbody tr")) body.append(row);
    cursor = next.next_cursor;
    more.hidden = !cursor;
  } }, "More");
  return h("div", {}, t, more);
}

async function allSubscriptionsView() {
  show(
    h("h1", {}, "All subscriptions"),
    await pagedTable("all-subscriptions", "/admin/subscriptions", [
      { title: "Tenant", cell: (s) => s.tenant_id },
      { title: "Name", cell: (s) => s.name },
      { title: "Sink", cell: sinkCell },
      ...healthCells(),
    ]),
  );
}

function clearNotices() {
  for (const n of document.querySelectorAll(".notice")) n.remove();
}

// Runs an action, re-renders the view, and says how it went.
async function act(fn) {
  clearNotices();
  try {
    const message = await fn();
    await route();
    if (message) notice(message, "ok");
  } catch (e) {
    await route();
    notice(e.message, "error");
  }
}

function replayForm(sub) {
  const since = h("input", { type: "text", name: "since", placeholder: "2026-11-30T00:00:00Z", testid: "replay-since" });
  const fromSeq = h("input", { type: "number", name: "from_seq", min: 1, placeholder: "1", testid: "replay-from-seq" });
  const form = h(
    "form",
    { class: "inline", testid: "replay-form" },
    h("label", {}, "Replay since ", since),
    h("label", {}, " or from seq ", fromSeq),
    h("button", { type: "submit", testid: "replay-submit" }, "Replay"),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const body = since.value.trim() ? { since: since.value.trim() } : { from_seq: Number(fromSeq.value || 1) };
    act(async () => {
      const r = await api(`/v1/subscriptions/${sub.id}/replay`, { method: "POST", body });
      return `Replay ${r.replay_id} started: ${r.state}, events ${r.from_seq}–${r.to_seq}.`;
    });
  });
  return form;
}

function actions(s) {
  if (readOnly()) return h("span", { class: "actions" }, link(`#/subscriptions/${s.id}`, "Deliveries", `deliveries-${s.id}`));
  const post = (path, body) => api(`/v1/subscriptions/${s.id}/${path}`, { method: "POST", body });
  const buttons = [
    h("button", { type: "button", testid: `verify-${s.id}`, onclick: () => act(async () => {
      await post("verify");
      return `${s.name}: verified.`;
    }) }, "Verify"),
    h("button", { type: "button", testid: `toggle-${s.id}`, onclick: () => act(async () => {
      await api(`/v1/subscriptions/${s.id}`, { method: "PATCH", body: { enabled: !s.enabled } });
      return `${s.name}: ${s.enabled ? "paused" : "resumed"}.`;
    }) }, s.enabled ? "Pause" : "Resume"),
  ];
  if (s.sink.type === "webhook") {
    buttons.push(h("button", { type: "button", testid: `rotate-${s.id}`, onclick: async () => {
      clearNotices();
      if (!window.confirm(`Rotate the signing secret of ${s.name}? The old one keeps signing for 24 hours.`)) return;
      try {
        const r = await post("rotate-secret");
        await route();
        secretShownOnce(s, r);
      } catch (e) {
        notice(e.message, "error");
      }
    } }, "Rotate secret"));
  }
  if (s.enabled && s.verification_state === "active") {
    buttons.push(h("button", { type: "button", testid: `test-${s.id}`, onclick: () => act(async () => {
      const r = await post("test");
      const a = r.delivery && r.delivery.attempt_log[0];
      const how = a ? ` (${a.status_code ? `HTTP ${a.status_code}, ` : ""}${a.latency_ms} ms${a.error ? `: ${a.error}` : ""})` : "";
      return `${s.name}: test event ${r.outcome}${how}.`;
    }) }, "Send test"));
  }
  buttons.push(link(`#/subscriptions/${s.id}`, "Deliveries", `deliveries-${s.id}`));
  return h("span", { class: "actions" }, buttons);
}

function secretShownOnce(s, r, kind) {
  // An ed25519 webhook has a public key to give the receiver, never a secret.
  const text = r.public_key
    ? (r.previous_secret_expires_at
      ? `New public key of ${s.name}. Both keys sign until ${time(r.previous_secret_expires_at)}; the receiver verifies with either (GET …/public-keys lists them).`
      : `Public key of ${s.name}: the receiver verifies deliveries with it (GET …/public-keys lists it again).`)
    : r.previous_secret_expires_at
      ? `New signing secret of ${s.name}. It is shown this once; both secrets sign until ${time(r.previous_secret_expires_at)}.`
      : `Signing secret of ${s.name}. It is shown this once: store it where the receiver reads it.`;
  const box = h(
    "div",
    { class: "secret", role: "dialog", "aria-label": kind || "New signing secret", testid: "secret" },
    h("p", {}, text),
    h("code", { testid: "secret-value" }, r.public_key || r.signing_secret),
    h("button", { type: "button", testid: "secret-close", onclick: () => box.remove() }, "I have stored it"),
  );
  document.getElementById("main").prepend(box);
}

function filterCount(s) {
  const n = (s.filters || []).length;
  return n === 0 ? "none" : `${n} filter${n === 1 ? "" : "s"}`;
}

/** A subscription's content filters as written (every one must match). */
function sinkCell(s) {
  const where = sinkWhere(s.sink);
  return where ? `${s.sink.type} · ${where}` : s.sink.type;
}

/** Every field of a subscription's destination as the API shows it (credentials never are). */
function destinationBlock(sub) {
  const rows = [];
  for (const [field, value] of Object.entries(sub.sink)) {
    const text = typeof value === "object" && value !== null ? JSON.stringify(value) : String(value);
    rows.push(h("dt", {}, field), h("dd", {}, text));
  }
  return h(
    "section",
    { "aria-label": "Destination" },
    h("h2", {}, "Destination"),
    h("dl", { testid: "destination" }, rows),
  );
}

function filtersBlock(sub) {
  const filters = sub.filters || [];
  if (filters.length === 0) {
    return h("p", { testid: "filters" }, "No content filters: every event of its types is delivered.");
  }
  return h(
    "section",
    { "aria-label": "Content filters" },
    h("h2", {}, "Filters (every one must match)"),
    h("pre", { testid: "filters" }, JSON.stringify(filters, null, 2)),
  );
}

const TRANSFORM_TEMPLATE = `function handler(event) {
  // Change event.data, event.headers or event.path (webhooks); return null to skip the event.
  return event;
}
`;

/**
 * A push subscription's transform: edited here, tried against the latest event of its types (as
 * a delivery to it would show it), saved or removed.
 */
function transformBlock(sub) {
  if (sub.sink.type === "pull") return null;
  const code = h("textarea", {
    id: "transform-code", testid: "transform-code", rows: 10, spellcheck: "false", "aria-describedby": "transform-help",
    readonly: readOnly(),
  });
  code.value = sub.transform ? sub.transform.code : TRANSFORM_TEMPLATE;
  const result = h("pre", { testid: "transform-result", "aria-live": "polite" });
  const transform = () => ({ language: "javascript", code: code.value });
  const run = h("button", { type: "button", testid: "transform-run", onclick: async () => {
    result.textContent = "Running…";
    try {
      const r = await api("/v1/transforms/test", {
        method: "POST",
        body: { transform: transform(), subscription_id: sub.id, latest: true },
      });
      const lines = [];
      if (r.error) lines.push(`Error: ${r.error}`);
      else if (r.output === null) lines.push("Skipped: the handler returned null, so this event would not be sent.");
      else lines.push(JSON.stringify(r.output, null, 2));
      if (r.logs.length) lines.push("", "console.log:", ...r.logs);
      lines.push("", `${r.duration_us} µs`);
      result.textContent = lines.join("\n");
    } catch (e) {
      result.textContent = e.message;
    }
  } }, "Run against the latest event of its types");
  const save = h("button", { type: "button", testid: "transform-save", onclick: () => act(async () => {
    await api(`/v1/subscriptions/${sub.id}`, { method: "PATCH", body: { transform: transform() } });
    return `${sub.name}: transform saved.`;
  }) }, "Save");
  const remove = sub.transform
    ? h("button", { type: "button", class: "danger", testid: "transform-remove", onclick: () => act(async () => {
      await api(`/v1/subscriptions/${sub.id}`, { method: "PATCH", body: { transform: null } });
      return `${sub.name}: transform removed.`;
    }) }, "Remove")
    : null;
  return h(
    "section",
    { "aria-label": "Transform", testid: "transform" },
    h("h2", {}, "Transform"),
    h("p", { id: "transform-help" }, sub.transform
      ? "Each event goes through this handler before it is sent; the hub signs what it sends after it."
      : "No transform: events go as they are. Write a handler, try it, then save it."),
    h("label", { for: "transform-code" }, "JavaScript handler"),
    code,
    h("p", { class: "actions" }, run, " ", readOnly() ? null : save, " ", readOnly() ? null : remove),
    result,
  );
}

/** For a subscription ordered by key: the keys waiting behind an earlier delivery, oldest first. */
function blockedKeysBlock(sub, ordering) {
  if (sub.ordering !== "key") {
    return h("p", { testid: "ordering" }, "Ordering: none (deliveries in any order).");
  }
  return h(
    "section",
    { "aria-label": "Blocked ordering keys" },
    h("h2", {}, "Ordering by key: blocked keys"),
    h("p", { testid: "ordering" }, "Each key's deliveries go one at a time, in order; a key waits while its head is retried."),
    table(
      "blocked-keys",
      [
        { title: "Key", cell: (b) => b.key },
        { title: "Waiting", cell: (b) => b.waiting },
        { title: "Head", cell: (b) => (b.head.ce_id ? link(`#/events/${b.head.ce_id}`, b.head.ce_id) : `seq ${b.head.event_seq}`) },
        { title: "Head state", cell: (b) => h("span", { class: `state ${b.head.state}` }, b.head.state) },
        { title: "Attempts", cell: (b) => b.head.attempts },
        { title: "Next attempt", cell: (b) => time(b.head.next_attempt_at) },
        { title: "Last error", cell: (b) => b.head.last_error || "" },
      ],
      ordering.blocked_keys,
    ),
  );
}

// ---------- The event catalog ----------

/** Declared, seen, or both. */
function provenance(t) {
  return [t.declared ? "declared" : null, t.seen ? "seen" : null].filter(Boolean).join(" · ");
}

function versionsText(t) {
  return t.versions.map((v) => `${v.source} ${v.schema_version || "any version"}`).join(", ");
}

function eventTypesTable(testid, items, admin) {
  return table(
    testid,
    [
      { title: "Type", cell: (t) => h("code", {}, t.type) },
      { title: "Description", cell: (t) => t.description || "" },
      { title: "Class", cell: (t) => t.class || "" },
      { title: "Producers and versions", cell: versionsText },
      { title: "Known from", cell: provenance },
      ...(admin ? [{ title: "Tenants", cell: (t) => t.tenants }] : []),
      { title: "Received", cell: (t) => t.events },
      { title: "Last seen", cell: (t) => time(t.last_seen) },
    ],
    items,
    (t) => ({ testid: `type-${t.type}` }),
  );
}

async function eventTypesView() {
  const list = await api("/v1/event-types");
  show(
    h("h1", {}, "Event types"),
    h("p", {}, "The types producers declare in their manifests, and those this tenant's inbox has received."),
    eventTypesTable("event-types", list.items, false),
  );
}

async function catalogView() {
  const list = await api("/admin/event-types");
  show(
    h("h1", {}, "Catalog"),
    h("h2", {}, "Manifest sources"),
    table(
      "manifests",
      [
        { title: "Source", cell: (m) => m.location },
        { title: "Producer", cell: (m) => [m.source, m.service_name].filter(Boolean).join(" · ") },
        { title: "Events", cell: (m) => m.events },
        { title: "Fetched", cell: (m) => time(m.fetched_at) },
        { title: "Checked", cell: (m) => time(m.checked_at) },
        {
          title: "State",
          cell: (m) => m.error
            ? h("span", { class: "state failed" }, `failing: ${m.error}`)
            : h("span", { class: "state active" }, m.problems.length ? `ok; ${m.problems.map((p) => `${p.field}: ${p.message}`).join("; ")}` : "ok"),
        },
      ],
      list.manifests,
    ),
    h("h2", {}, "Event types"),
    eventTypesTable("catalog-types", list.items, true),
  );
}

async function subscriptionsView() {
  const [list, catalog] = await Promise.all([
    pagedTable("subscriptions", "/v1/subscriptions", [
      { title: "Name", cell: (s) => s.name },
      { title: "Event types", cell: (s) => s.event_types.join(", ") },
      { title: "Filters", cell: (s) => filterCount(s) },
      { title: "Sink", cell: sinkCell },
      ...healthCells(),
      { title: "", cell: actions },
    ], (s) => ({ testid: `sub-${s.id}` })),
    readOnly() ? null : api("/v1/event-types"),
  ]);
  show(
    h("h1", {}, "Subscriptions"),
    readOnly() ? h("p", { class: "notice", testid: "read-only" }, "A read-only portal: you can look, not change.") : subscriptionForm(catalog.items, null),
    list,
  );
}

function attemptsList(d) {
  return h(
    "ol",
    { class: "attempts" },
    d.attempt_log.map((a) =>
      h("li", {}, `#${a.attempt} ${time(a.started_at)} ${a.outcome}${a.status_code ? ` ${a.status_code}` : ""} ${a.latency_ms} ms${a.error ? ` — ${a.error}` : ""}`),
    ),
  );
}

// ---------- Charts (SVG drawn here: no third-party code) ----------

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function clock(t) {
  return new Date(t).toISOString().slice(11, 16);
}

/**
 * One chart over the window's minutes: `series` is [{ name, color, values, kind: "bar" | "line" }]
 * (bars stack). Axes are labelled; the summary is the chart's accessible name.
 */
function chart(testid, title, unit, minutes, series, summary) {
  const [width, height, left, bottom, top] = [720, 180, 48, 28, 10];
  const plotW = width - left - 8;
  const plotH = height - bottom - top;
  const n = minutes.length;
  const stacked = minutes.map((_, i) => series.filter((s) => s.kind === "bar").reduce((a, s) => a + (s.values[i] || 0), 0));
  const lines = series.filter((s) => s.kind === "line").flatMap((s) => s.values.filter((v) => v !== null));
  const max = Math.max(1, ...stacked, ...lines);
  const x = (i) => left + (i * plotW) / Math.max(1, n);
  const y = (v) => top + plotH - (v / max) * plotH;
  const parts = [
    svg("line", { x1: left, y1: top + plotH, x2: left + plotW, y2: top + plotH, stroke: "#5b6673" }),
    svg("line", { x1: left, y1: top, x2: left, y2: top + plotH, stroke: "#5b6673" }),
    svg("text", { x: left - 6, y: top + 10, "text-anchor": "end", "font-size": 11, fill: "#1d232b" }, `${Math.round(max * 10) / 10}`),
    svg("text", { x: left - 6, y: top + plotH, "text-anchor": "end", "font-size": 11, fill: "#1d232b" }, "0"),
    svg("text", { x: 10, y: top + plotH / 2, "font-size": 11, fill: "#1d232b", transform: `rotate(-90 10 ${top + plotH / 2})`, "text-anchor": "middle" }, unit),
  ];
  for (const i of [0, Math.floor(n / 2), n - 1]) {
    if (minutes[i]) parts.push(svg("text", { x: x(i), y: height - 8, "font-size": 11, fill: "#1d232b", "text-anchor": i === 0 ? "start" : i === n - 1 ? "end" : "middle" }, `${clock(minutes[i])} UTC`));
  }
  const barW = Math.max(1, plotW / Math.max(1, n) - 1);
  const base = minutes.map(() => 0);
  for (const s of series.filter((q) => q.kind === "bar")) {
    s.values.forEach((v, i) => {
      if (!v) return;
      parts.push(svg("rect", { x: x(i), y: y(base[i] + v), width: barW, height: Math.max(1, (v / max) * plotH), fill: s.color }, svg("title", {}, `${clock(minutes[i])}: ${v} ${s.name}`)));
      base[i] += v;
    });
  }
  for (const s of series.filter((q) => q.kind === "line")) {
    const points = s.values.map((v, i) => (v === null ? null : `${x(i) + barW / 2},${y(v)}`));
    let run = [];
    for (const p of [...points, null]) {
      if (p) run.push(p);
      else if (run.length) {
        parts.push(run.length === 1
          ? svg("circle", { cx: run[0].split(",")[0], cy: run[0].split(",")[1], r: 2, fill: s.color })
          : svg("polyline", { points: run.join(" "), fill: "none", stroke: s.color, "stroke-width": 2 }));
        run = [];
      }
    }
  }
  // Swatches are SVG (a fill attribute, not an inline style the page's policy refuses).
  const swatch = (color) => svg("svg", { width: 12, height: 12, class: "swatch", "aria-hidden": "true" }, svg("rect", { width: 12, height: 12, rx: 2, fill: color }));
  const legend = h("ul", { class: "legend" }, series.map((s) => h("li", {}, swatch(s.color), s.name)));
  return h(
    "figure",
    { class: "chart", testid },
    h("figcaption", {}, title),
    svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${title}: ${summary}`, width: "100%" }, parts),
    legend,
  );
}

async function statsBlock(sub, window) {
  const stats = await api(`/v1/subscriptions/${sub.id}/stats?window=${window}`);
  const b = stats.buckets;
  const minutes = b.map((m) => m.minute);
  const total = (f) => b.reduce((a, m) => a + m[f], 0);
  const pick = (f) => b.map((m) => m[f]);
  const toggle = h(
    "p",
    { class: "actions", role: "group", "aria-label": "Window" },
    ["1h", "24h"].map((w) => h("button", { type: "button", testid: `stats-${w}`, "aria-pressed": String(w === window), onclick: async () => {
      document.querySelector("[data-testid=stats]").replaceWith(await statsBlock(sub, w));
    } }, w === "1h" ? "Last hour" : "Last day")),
  );
  const p99 = pick("latency_p99_ms").filter((v) => v !== null);
  return h(
    "section",
    { "aria-label": "Statistics", testid: "stats" },
    h("h2", {}, `Statistics, ${window === "1h" ? "last hour" : "last day"}`),
    toggle,
    chart("chart-deliveries", "Attempts per minute", "attempts", minutes, [
      { name: "delivered", color: "#1f6fb2", values: pick("delivered"), kind: "bar" },
      { name: "failed", color: "#d9822b", values: pick("failed"), kind: "bar" },
      { name: "dead letters", color: "#3b3b3b", values: pick("dead"), kind: "bar" },
    ], `${total("delivered")} delivered, ${total("failed")} failed, ${total("dead")} dead-lettered`),
    chart("chart-latency", "Attempt latency", "ms", minutes, [
      { name: "p50", color: "#1f6fb2", values: pick("latency_p50_ms"), kind: "line" },
      { name: "p99", color: "#d9822b", values: pick("latency_p99_ms"), kind: "line" },
    ], p99.length ? `p99 up to ${Math.round(Math.max(...p99))} ms` : "no attempts"),
    chart("chart-backlog", "Backlog (pending and held jobs)", "jobs", minutes, [
      { name: "backlog", color: "#6a3d9a", values: pick("backlog"), kind: "line" },
    ], `now ${b.length && b[b.length - 1].backlog !== null ? b[b.length - 1].backlog : "not sampled"}`),
  );
}

async function subscriptionView(id) {
  const [sub, page, ordering, catalog] = await Promise.all([
    api(`/v1/subscriptions/${id}`),
    api(`/v1/subscriptions/${id}/deliveries?limit=200`),
    api(`/v1/subscriptions/${id}/ordering?limit=100`),
    api("/v1/event-types"),
  ]);
  const remove = h("button", { type: "button", class: "danger", testid: "delete", onclick: async () => {
    clearNotices();
    if (!window.confirm(`Delete ${sub.name}? Its waiting deliveries are cancelled; this cannot be undone.`)) return;
    try {
      await api(`/v1/subscriptions/${id}`, { method: "DELETE" });
      await go("#/subscriptions");
      notice(`${sub.name}: deleted.`, "ok");
    } catch (e) {
      notice(e.message, "error");
    }
  } }, "Delete");
  const editor = h("details", { class: "edit", testid: "edit" }, h("summary", { testid: "edit-open" }, "Change this subscription"), subscriptionForm(catalog.items, sub), remove);
  const redrive = h("button", { type: "button", testid: "redrive", onclick: () => act(async () => {
    const r = await api(`/v1/subscriptions/${id}/redrive`, { method: "POST", body: {} });
    return `${r.redriven} dead-lettered deliveries are pending again.`;
  }) }, "Redrive dead letters");
  show(
    h("h1", {}, `Subscription ${sub.name}`),
    h("p", {}, `${sub.sink.type} · ${sub.verification_state} · ${sub.enabled ? "enabled" : "disabled"}`),
    h("p", {}, readOnly() ? null : redrive, " ", actions(sub)),
    sub.sink.type === "pull" ? null : await statsBlock(sub, "1h"),
    destinationBlock(sub),
    filtersBlock(sub),
    transformBlock(sub),
    blockedKeysBlock(sub, ordering),
    readOnly() ? null : replayForm(sub),
    readOnly() ? null : editor,
    h("h2", {}, "Deliveries"),
    table(
      "deliveries",
      [
        { title: "Event", cell: (d) => (d.ce_id ? link(`#/events/${d.ce_id}`, d.ce_id) : `seq ${d.event_seq}`) },
        { title: "State", cell: (d) => h("span", { class: `state ${d.state}` }, d.state) },
        { title: "Attempts", cell: (d) => d.attempts },
        { title: "Next attempt", cell: (d) => time(d.next_attempt_at) },
        { title: "Last error", cell: (d) => d.last_error || "" },
        { title: "Attempt log", cell: attemptsList },
      ],
      page.items,
    ),
  );
}

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

// ---------- Router ----------

// Renders run one after another, in the order they were asked for: a slow render never lands
// over a later one (and wipes what was typed into it).
let routing = Promise.resolve();

function route() {
  routing = routing.then(render, render);
  return routing;
}

/** Moves to a view and renders it once (a changed hash alone would render it again). */
function go(hash) {
  if (location.hash !== hash) history.pushState(null, "", hash);
  return route();
}

async function render() {
  const hash = location.hash || "#/";
  const parts = hash.replace(/^#\/?/, "").split("?")[0].split("/").filter(Boolean).map(decodeURIComponent);
  const [view, id] = parts;
  if (view === "portal" && id) return openPortal(id);
  chrome();
  if (!state.token) return signInView();
  try {
    await loadSinks();
    if (state.role === "admin") {
      if (view === "tenants" || !view) return await tenantsView();
      if (view === "catalog") return await catalogView();
      if (view === "all-subscriptions") return await allSubscriptionsView();
      if (view === "quarantine") return await quarantineView();
      if (view === "dlq") return await dlqView();
      if (!state.tenant) return await tenantsView();
    }
    if (view === "subscriptions" && id) return await subscriptionView(id);
    if (view === "events" && id) return await eventView(id);
    if (view === "events") return await eventsView();
    if (view === "event-types") return await eventTypesView();
    return await subscriptionsView();
  } catch (e) {
    if (e.status === 401) {
      if (state.portal) return sessionEnded();
      forget();
      history.replaceState(null, "", "#/signin");
      chrome();
      return signInView();
    }
    show(h("h1", {}, "Something went wrong"));
    notice(e.message, "error");
  }
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", route);

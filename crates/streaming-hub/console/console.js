// Streaming Hub console: one page over the hub's own API.
//
// It signs in with the admin token (every tenant: the /admin listings, and a tenant's views by
// acting for it with the X-Streaming-Hub-Tenant header) or a tenant API key (that tenant only),
// kept in this tab's session storage; or a person signs in through the identity provider, and
// the hub keeps the session (an HttpOnly cookie this script never sees; it sends the session's
// CSRF token with every call, and names the tenant it acts in). Every value is rendered as text,
// never markup.
"use strict";

const store = window.sessionStorage;
const state = {
  token: store.getItem("sh.token"),
  role: store.getItem("sh.role"), // "admin" or "tenant"
  tenant: store.getItem("sh.tenant"), // the tenant an admin acts for
  // A portal session (opened from a one-time URL): its tenant, scope and end.
  portal: JSON.parse(store.getItem("sh.portal") || "null"),
  // A person signed in through the identity provider: who, their tenants and roles, the
  // session's CSRF token (read from the hub on each load; undefined until asked).
  person: undefined,
};

/** The role a signed-in person holds in a tenant: its own grant, or what a platform role gives. */
function personRole(tenant) {
  const p = state.person;
  if (!p) return null;
  const own = (p.tenants.find((t) => t.tenant_id === tenant) || {}).role;
  const platform = { "platform-admin": "admin", "platform-viewer": "viewer" }[p.platform_role];
  const rank = { viewer: 1, operator: 2, admin: 3 };
  return [own, platform].filter(Boolean).sort((a, b) => rank[b] - rank[a])[0] || null;
}

/** A read-only portal session or a viewer: nothing that changes anything is offered. */
function readOnly() {
  if (state.person) return personRole(state.tenant) === "viewer";
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
  // A person's calls go with the session's cookie: its CSRF token proves this page made them.
  if (!token && state.person) headers["X-CSRF-Token"] = state.person.csrf_token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (asTenant && (state.role === "admin" || state.person) && state.tenant && path.startsWith("/v1/")) {
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

/** Whether a person is signed in through the identity provider (the hub's session cookie). */
async function personSession() {
  if (state.token || state.portal) return null;
  const res = await fetch("/console/sso/session", { headers: { Accept: "application/json" } });
  if (!res.ok) return null;
  const p = await res.json();
  state.person = p;
  state.role = p.platform_role ? "admin" : "tenant";
  const stored = store.getItem("sh.tenant");
  if (stored && personRole(stored)) state.tenant = stored;
  else actFor(!p.platform_role && p.tenants.length > 0 ? p.tenants[0].tenant_id : null);
  return p;
}

function signInView() {
  const input = h("input", { type: "password", id: "token", name: "token", autocomplete: "off", required: true, testid: "token" });
  // Filled when the hub offers sign-in through the identity provider.
  const provider = h("p", { testid: "sso-offer", hidden: true });
  const form = h(
    "form",
    { class: "signin", testid: "signin" },
    h("h1", {}, "Sign in"),
    provider,
    h("p", {}, "With the admin token (every tenant) or a tenant API key (that tenant only)."),
    h("label", { for: "token" }, "Token or API key"),
    input,
    h("button", { type: "submit", testid: "signin-submit" }, "Sign in"),
  );
  fetch("/console/sso").then((r) => r.json()).then((offer) => {
    if (!offer.enabled) return;
    provider.replaceChildren(link("/console/sso/start", "Sign in with your organization's account", "sso-signin"), " — or:");
    provider.hidden = false;
  }).catch(() => {});
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
  state.token = state.role = state.tenant = state.portal = state.person = null;
}

async function signOut() {
  if (state.person) {
    try {
      await api("/console/sso/sign-out", { method: "POST", asTenant: false });
    } catch (e) {
      // Already ended (401): signed out either way.
      if (e.status !== 401) return notice(`Sign-out failed: ${e.message}`, "error");
    }
  }
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
  out.hidden = !(state.token || state.person) || Boolean(state.portal);
  out.onclick = signOut;
  // A person with several tenants picks the one they act in.
  const switcher = document.getElementById("switcher");
  const tenants = state.person ? state.person.tenants : [];
  switcher.hidden = tenants.length < 2;
  if (!switcher.hidden) {
    switcher.replaceChildren(
      ...(state.tenant && !tenants.some((t) => t.tenant_id === state.tenant) ? [h("option", { value: state.tenant }, state.tenant)] : []),
      ...tenants.map((t) => h("option", { value: t.tenant_id, selected: t.tenant_id === state.tenant }, `${t.tenant_id} (${t.role})`)),
    );
    switcher.onchange = () => { actFor(switcher.value); go("#/subscriptions"); };
  }
  const links = [];
  if (state.role === "admin") {
    links.push(link("#/tenants", "Tenants", "nav-tenants"));
    links.push(link("#/all-subscriptions", "All subscriptions", "nav-all-subscriptions"));
    links.push(link("#/quarantine", "Quarantine", "nav-quarantine"));
    links.push(link("#/dlq", "DLQ", "nav-dlq"));
    links.push(link("#/catalog", "Catalog", "nav-catalog"));
    if (!state.tenant) links.push(link("#/audit", "Audit", "nav-platform-audit"));
  }
  if (state.role === "tenant" || state.tenant) {
    links.push(link("#/subscriptions", "Subscriptions", "nav-subscriptions"));
    links.push(link("#/events", "Event log", "nav-events"));
    links.push(link("#/event-types", "Event types", "nav-event-types"));
    links.push(link("#/audit", "Audit", "nav-audit"));
  }
  nav.replaceChildren(...links);
  if (state.person) who.textContent = `${state.person.subject} · ${state.tenant ? `${personRole(state.tenant)} in ${state.tenant}` : state.person.platform_role}`;
  else if (!state.token) who.textContent = "";
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
        const pacer = d.paced_by ? ` · paced by ${d.paced_by}` : "";
        return `${d.in_flight} / ${d.allowance ?? "—"}${paused}${pacer}`;
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

/** A subscription's sink in one line: its type and where it delivers. */
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
    readOnly() ? h("p", { class: "notice", testid: "read-only" }, state.person ? "You are a viewer here: you can look, not change." : "A read-only portal: you can look, not change.") : subscriptionForm(catalog.items, null),
    list,
  );
}

function attemptsList(d) {
  return h(
    "ol",
    { class: "attempts" },
    d.attempt_log.map((a) =>
      h(
        "li",
        {},
        `#${a.attempt} ${time(a.started_at)} ${a.outcome}${a.status_code ? ` ${a.status_code}` : ""} ${a.latency_ms} ms${a.error ? ` — ${a.error}` : ""}`,
        a.ledger_index === undefined ? null : [" · ", link(`#/ledger/${a.ledger_index}`, `ledger entry ${a.ledger_index}`, `ledger-${a.ledger_index}`)],
      ),
    ),
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
  if (!state.token && state.person === undefined) await personSession().catch(() => null);
  chrome();
  if (!state.token && !state.person) return signInView();
  try {
    await loadSinks();
    if (state.role === "admin") {
      if (view === "tenants" || !view) return await tenantsView();
      if (view === "catalog") return await catalogView();
      if (view === "all-subscriptions") return await allSubscriptionsView();
      if (view === "quarantine") return await quarantineView();
      if (view === "dlq") return await dlqView();
      if (view === "audit" && !state.tenant) return await auditView();
      if (!state.tenant) return await tenantsView();
    }
    if (view === "subscriptions" && id) return await subscriptionView(id);
    if (view === "events" && id) return await eventView(id);
    if (view === "events") return await eventsView();
    if (view === "event-types") return await eventTypesView();
    if (view === "audit") return await auditView();
    if (view === "ledger" && id) return await ledgerEntryView(id);
    return await subscriptionsView();
  } catch (e) {
    if (e.status === 401) {
      if (state.portal) return sessionEnded();
      state.person = null;
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

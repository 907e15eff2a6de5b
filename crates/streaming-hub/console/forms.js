// Streaming Hub console: the subscription form (create and edit, one set of fields per sink
// type), the content-filter editor tested live against a sample event, and what maps the
// server's 422 to the field it names. Loaded before console.js, whose helpers (h, api, notice,
// route, …) it calls only at run time.
"use strict";

/**
 * Every sink type, read once from the API's own description (`GET /openapi.json`, the `Sink`
 * schema the hub derives from its list of sinks): what each is, its fields by their path in the
 * `sink` object, and how a destination of it reads in one line. Nothing here names a sink type:
 * a new sink's form comes with its schema.
 */
let SINKS = null;

async function loadSinks() {
  if (SINKS) return SINKS;
  const res = await fetch("/openapi.json");
  if (!res.ok) throw new Error(`The API's description could not be read (HTTP ${res.status}).`);
  SINKS = sinksOf(await res.json());
  return SINKS;
}

const WORDS = { url: "URL", arn: "ARN", pem: "PEM", id: "ID", tls: "TLS", sasl: "SASL", ca: "CA", ms: "(ms)" };

/** `credentials.web_identity.role_arn` → "Credentials › Web identity › Role ARN". */
function label(key) {
  return key.split(".").map((part) => {
    const words = part.split("_").map((w) => WORDS[w] || w);
    const text = words.join(" ");
    return text.charAt(0).toUpperCase() + text.slice(1);
  }).join(" › ");
}

/** The sink types of an OpenAPI document: `{type: {label, summary, fields}}`. */
function sinksOf(doc) {
  const schemas = doc.components.schemas;
  const resolve = (s) => {
    let seen = 0;
    while (s && s.$ref && seen++ < 16) s = schemas[s.$ref.split("/").pop()];
    return s || {};
  };
  // An optional value is `oneOf: [its schema, null]`: its schema, with the description kept.
  const unwrap = (raw) => {
    if (raw.oneOf && raw.oneOf.some((x) => x.type === "null")) {
      const inner = raw.oneOf.find((x) => x.type !== "null");
      return { ...resolve(inner), description: inner.description || raw.description };
    }
    return { ...resolve(raw), description: raw.description || resolve(raw).description };
  };
  const kinds = (s) => [].concat(s.type || []);
  const tagged = (s) => s.oneOf && s.oneOf.every((v) => v.properties && v.properties.type && v.properties.type.enum);
  // `required`: the fields the sink itself requires (a nested object's are required only when it
  // is given, so not marked).
  const fieldsOf = (schema, prefix, required, extra) => {
    const out = [];
    // The required fields first, in the schema's order; then the rest.
    const order = schema.required || [];
    const rank = (n) => (order.includes(n) ? order.indexOf(n) : order.length);
    const names = Object.keys(schema.properties || {}).sort((a, b) => rank(a) - rank(b));
    for (const name of names) {
      const raw = schema.properties[name];
      if (name === "type" && (!prefix || extra.variant)) continue;
      const s = unwrap(raw);
      const key = prefix + name;
      const hint = s.description || "";
      if (tagged(s)) {
        // One of several kinds: the kind chosen, then that kind's own fields only.
        const names = s.oneOf.map((v) => v.properties.type.enum[0]);
        out.push({ key: `${key}.type`, label: label(key), hint, options: ["", ...names], ...extra });
        for (const v of s.oneOf) {
          out.push(...fieldsOf(v, `${key}.`, [], { ...extra, variant: [key, v.properties.type.enum[0]] }));
        }
      } else if (s.oneOf) {
        // Alternatives told apart by their fields (keys or a role): every alternative's fields.
        for (const v of s.oneOf) out.push(...fieldsOf(resolve(v), `${key}.`, [], extra));
      } else if (kinds(s).includes("object") && s.properties) {
        out.push(...fieldsOf(s, `${key}.`, [], extra));
      } else if (kinds(s).includes("object") || kinds(s).includes("array")) {
        // A map or a list (a webhook's static headers): set through the API, not this form.
        continue;
      } else {
        const f = { key, label: label(key), hint, required: required.includes(name), ...extra };
        if (s.enum) f.options = [...(f.required ? [] : [""]), ...s.enum];
        else if (kinds(s).includes("boolean")) f.type = "checkbox";
        else if (kinds(s).includes("integer") || kinds(s).includes("number")) f.type = "number";
        else if (s.contentMediaType) f.type = "textarea"; // a document in a string: a key, certificates
        else if (s.writeOnly || s["x-secret"]) f.type = "password";
        else if (s.format === "uri") f.type = "url";
        // A secret is never shown; one of a chosen kind (an authentication) is given again on
        // every change of the destination, the others are kept when left blank.
        if (s.writeOnly || s["x-secret"]) {
          f.secret = true;
          f.again = Boolean(extra.variant);
        }
        out.push(f);
      }
    }
    return out;
  };
  const sinks = {};
  for (const item of resolve(schemas.Sink).oneOf || []) {
    const [ref, tag] = item.allOf || [];
    const type = tag && tag.properties.type.enum[0];
    if (!type) continue;
    const schema = resolve(ref);
    const what = (schema.description || "").replace(/\s+/g, " ").split(/[.;:,](?:\s|$)/)[0].replace(/`/g, "");
    sinks[type] = {
      label: what ? `${type}: ${what}` : type,
      summary: item["x-summary"] || "",
      fields: fieldsOf(schema, "", schema.required || [], {}),
    };
  }
  return sinks;
}

/** A destination in one line, by its sink type's summary (`{field}`, `{field?text}`). */
function sinkWhere(sink) {
  const type = SINKS && SINKS[sink.type];
  if (!type || !type.summary) return "";
  return type.summary.replace(/\{([a-z0-9_.]+)(\?([^}]*))?\}/g, (_, key, cond, text) => {
    const value = getPath(sink, key);
    if (cond !== undefined) return value !== undefined && value !== null && value !== false ? text : "";
    return value === undefined || value === null ? "" : String(value);
  });
}

function sinkFields(type) {
  return (SINKS && SINKS[type] && SINKS[type].fields) || [];
}

function getPath(obj, path) {
  return path.split(".").reduce((o, k) => (o && typeof o === "object" ? o[k] : undefined), obj);
}

function deletePath(obj, path) {
  const keys = path.split(".");
  const parent = getPath(obj, keys.slice(0, -1).join("."));
  if (keys.length === 1) delete obj[keys[0]];
  else if (parent && typeof parent === "object") delete parent[keys[keys.length - 1]];
}

function setPath(obj, path, value) {
  const keys = path.split(".");
  let o = obj;
  for (const k of keys.slice(0, -1)) o = o[k] = o[k] || {};
  o[keys[keys.length - 1]] = value;
}

function fieldId(prefix, key) {
  return `${prefix}-sink-${key.replace(/\./g, "-")}`;
}

/** A labelled control with the place its error is shown. */
function formField(id, label, control, hint) {
  control.setAttribute("aria-describedby", [hint && hint.id, `${id}-error`].filter(Boolean).join(" "));
  return h(
    "div",
    { class: control.type === "checkbox" ? "field check" : "field" },
    h("label", { for: id }, label),
    control,
    hint || null,
    h("p", { class: "field-error", id: `${id}-error`, role: "alert", testid: `${id}-error`, hidden: true }),
  );
}

/** The inputs of one sink type, filled from `current` (secrets are never shown: blank keeps them). */
function sinkInputs(prefix, type, current) {
  return sinkFields(type).map((f) => {
    const id = fieldId(prefix, f.key);
    let control;
    if (f.options) {
      const unset = f.key.endsWith(".type") ? "none" : "default";
      control = h("select", { id, name: f.key, testid: id }, f.options.map((o) => h("option", { value: o }, o || unset)));
      control.value = getPath(current, f.key) || f.options[0];
    } else if (f.type === "checkbox") {
      control = h("input", { id, name: f.key, type: "checkbox", testid: id });
      control.checked = Boolean(getPath(current, f.key));
    } else if (f.type === "textarea") {
      control = h("textarea", {
        id, name: f.key, testid: id, rows: 4, spellcheck: "false",
        placeholder: f.secret && current ? "give it again to change the destination" : "-----BEGIN …",
      });
      control.value = f.secret ? "" : getPath(current, f.key) || "";
    } else {
      const value = f.secret ? "" : getPath(current, f.key);
      control = h("input", {
        id, name: f.key, type: f.type || "text", testid: id, autocomplete: "off",
        placeholder: f.secret && current ? (f.again ? "give it again to change the destination" : "unchanged unless typed")
          : f.placeholder || "",
        value: value === undefined || value === null ? "" : String(value),
      });
    }
    const hint = f.hint ? h("p", { class: "hint", id: `${id}-hint` }, f.hint.replace(/`/g, "")) : null;
    return formField(id, f.required ? `${f.label} (required)` : f.label, control, hint);
  });
}

/** The `sink` object the fields describe (empty optional fields left out). */
function sinkValue(prefix, type) {
  const sink = { type };
  const fields = sinkFields(type);
  for (const f of fields) {
    const el = document.getElementById(fieldId(prefix, f.key));
    if (!el) continue;
    if (f.type === "checkbox") {
      setPath(sink, f.key, el.checked);
    } else if (el.value.trim() !== "") {
      setPath(sink, f.key, f.type === "number" ? Number(el.value) : el.value.trim());
    }
  }
  // Only the chosen kind's fields (an authentication); nothing of it when none is chosen.
  for (const f of fields) {
    if (!f.variant) continue;
    const [base, kind] = f.variant;
    const chosen = getPath(sink, `${base}.type`);
    if (!chosen) deletePath(sink, base);
    else if (chosen !== kind) deletePath(sink, f.key);
  }
  return sink;
}

/** Shows a 422 beside the input of the field it names; true when one was found. */
function showFieldError(prefix, e) {
  const at = e.status === 422 && /^([a-z_.\[\]0-9]+): /.exec(e.message);
  if (!at) return false;
  const field = at[1];
  const direct = {
    name: "name", origin: "origin", ordering: "ordering", limits: "max-in-flight",
    "limits.max_in_flight": "max-in-flight", "limits.per_second": "per-second",
  }[field];
  let id = direct ? `${prefix}-${direct}` : null;
  if (field.startsWith("event_types")) id = `${prefix}-types`;
  if (field.startsWith("filters")) id = `${prefix}-filters`;
  if (field === "sink.type") id = `${prefix}-sink`;
  else if (field.startsWith("sink.")) {
    const key = field.slice(5);
    id = [key, key.split(".")[0]].map((k) => fieldId(prefix, k)).find((c) => document.getElementById(c)) || `${prefix}-sink`;
  }
  const input = id && document.getElementById(id);
  if (!input) return false;
  const err = document.getElementById(`${id}-error`);
  err.textContent = e.message;
  err.hidden = false;
  input.setAttribute("aria-invalid", "true");
  input.focus();
  return true;
}

/** The known types a pattern matches (`*` is a whole segment). */
function matchesOf(pattern, types) {
  const [r, e] = pattern.split(".");
  if (e === undefined) return [];
  return types.filter((t) => {
    const [tr, te] = t.type.split(".");
    return (r === "*" || r === tr) && (e === "*" || e === te) && (tr !== "streaming_hub" || r !== "*");
  });
}

/** An inbox event as the structured CloudEvent `POST /v1/filters/test` reads. */
function structured(e) {
  const [resourcetype, eventtype] = e.type.split(".");
  const ce = {
    specversion: "1.0", id: e.ce_id, source: e.source, type: e.ce_type, time: e.time,
    datacontenttype: e.data_content_type, schemaversion: e.schema_version, resourcetype, eventtype,
    ...e.extensions,
  };
  if (e.subject) ce.subject = e.subject;
  if (e.payload_encoding === "base64") ce.data_base64 = e.payload;
  else ce.data = e.payload;
  return ce;
}

/** The filters editor: the JSON list, a sample event, and the live result of testing one on the other. */
function filtersEditor(prefix, current, patterns) {
  const id = `${prefix}-filters`;
  const text = h("textarea", { id, name: "filters", rows: 5, testid: id, spellcheck: "false" }, JSON.stringify(current || [], null, 2));
  const sample = h("textarea", { id: `${prefix}-sample`, rows: 6, testid: `${prefix}-sample`, spellcheck: "false" });
  const result = h("p", { id: `${prefix}-filters-result`, class: "matches", testid: `${prefix}-filters-result`, "aria-live": "polite" });
  let timer = null;
  const test = async () => {
    let filters;
    let event;
    try {
      filters = JSON.parse(text.value || "[]");
    } catch (e) {
      result.textContent = `The filters are not JSON: ${e.message}`;
      return;
    }
    try {
      event = JSON.parse(sample.value);
    } catch (e) {
      result.textContent = "Type or paste a sample event (structured CloudEvent JSON) to test against.";
      return;
    }
    try {
      const r = await api("/v1/filters/test", { method: "POST", body: { filters, event } });
      const each = r.results.map((x, i) => `#${i + 1} ${x.matches ? "matches" : "does not match"}${x.error ? ` (${x.error})` : ""}`).join("; ");
      result.textContent = `${r.matches ? "The sample event matches" : "The sample event does not match"}${each ? `: ${each}` : ""}.`;
    } catch (e) {
      result.textContent = e.message;
    }
  };
  const later = () => { clearTimeout(timer); timer = setTimeout(test, 300); };
  text.addEventListener("input", later);
  sample.addEventListener("input", later);
  // The latest event of the subscription's types in the log, as a sample.
  (async () => {
    const pattern = (patterns() || [])[0];
    if (!pattern) return;
    try {
      const page = await api(`/v1/events?limit=100&event_type=${encodeURIComponent(pattern)}`);
      const latest = page.items[page.items.length - 1];
      if (latest && !sample.value) {
        sample.value = JSON.stringify(structured(latest), null, 2);
        test();
      }
    } catch (_) { /* no sample: one can be typed */ }
  })();
  return [
    formField(id, "Content filters (JSON; every one must match)", text),
    formField(`${prefix}-sample`, "Sample event (the latest of its types, or typed)", sample, result),
  ];
}

/**
 * Before saving an edit: what the edited event types and filters would have matched of the last
 * 24 hours beside what the subscription matched (`POST …/simulate`; nothing changes).
 */
function simulation(sub, patterns) {
  const out = h("p", { class: "simulation", testid: "edit-simulation", "aria-live": "polite" });
  const run = async () => {
    out.textContent = "Reading the last 24 hours…";
    let filters;
    try {
      filters = JSON.parse(document.getElementById("edit-filters").value || "[]");
    } catch (e) {
      out.textContent = `The filters are not JSON (${e.message}).`;
      return;
    }
    try {
      const since = new Date(Date.now() - 24 * 3600 * 1000).toISOString();
      const r = await api(`/v1/subscriptions/${sub.id}/simulate`, {
        method: "POST", body: { since, event_types: patterns(), filters, limit: 5 },
      });
      const more = r.complete ? "" : " (the first million events only)";
      out.textContent = `Last 24 hours${more}: ${r.current} events matched now, ${r.draft} with these changes ` +
        `(${r.only_current} only now, ${r.only_draft} only with the changes).`;
    } catch (e) {
      out.textContent = e.message;
    }
  };
  return [
    h("button", { type: "button", testid: "edit-simulate", onclick: run }, "Preview the change on the last 24 hours"),
    out,
  ];
}

/**
 * The subscription form: a new subscription (`sub` null) or changes to one. Only what changed
 * is sent on an edit; a secret left blank is kept.
 */
function subscriptionForm(types, sub) {
  const prefix = sub ? "edit" : "new";
  const name = h("input", { id: `${prefix}-name`, name: "name", required: true, testid: `${prefix}-name`, value: sub ? sub.name : "" });
  const known = h("datalist", { id: `${prefix}-known-types` }, types.map((t) => h("option", { value: t.type, label: t.description || provenance(t) })));
  const typesInput = h("input", {
    id: `${prefix}-types`, name: "event_types", required: true, list: `${prefix}-known-types`,
    placeholder: "account.created, loan.*", testid: `${prefix}-types`, value: sub ? sub.event_types.join(", ") : "",
  });
  const matches = h("ul", { id: `${prefix}-types-matches`, class: "matches", testid: `${prefix}-types-matches`, "aria-live": "polite" });
  const patterns = () => typesInput.value.split(",").map((p) => p.trim()).filter(Boolean);
  const showMatches = () => matches.replaceChildren(...patterns().map((p) => {
    const found = matchesOf(p, types);
    return h(
      "li",
      { class: found.length ? "" : "unknown" },
      h("code", {}, p),
      found.length
        ? ` matches ${found.map((t) => `${t.type}${t.description ? ` (${t.description})` : ""}`).join(", ")}`
        : " matches no known type",
    );
  }));
  typesInput.addEventListener("input", showMatches);
  const origin = h("input", { id: `${prefix}-origin`, name: "origin", placeholder: "any producer", testid: `${prefix}-origin`, value: sub && sub.origin ? sub.origin : "" });
  const type = sub ? sub.sink.type : "pull";
  const sinkSelect = h(
    "select",
    { id: `${prefix}-sink`, name: "sink", testid: `${prefix}-sink`, disabled: Boolean(sub) },
    Object.keys(SINKS || {}).map((k) => h("option", { value: k }, SINKS[k].label)),
  );
  sinkSelect.value = type;
  const sinkBox = h("fieldset", { class: "sink", testid: `${prefix}-sink-fields` }, h("legend", {}, "Destination settings"), sinkInputs(prefix, type, sub ? sub.sink : null));
  sinkSelect.addEventListener("change", () => {
    sinkBox.replaceChildren(h("legend", {}, "Destination settings"), ...sinkInputs(prefix, sinkSelect.value, null));
    sinkBox.hidden = sinkFields(sinkSelect.value).length === 0;
    ordering.disabled = sinkSelect.value === "pull";
    maxInFlight.disabled = perSecond.disabled = sinkSelect.value === "pull";
  });
  sinkBox.hidden = sinkFields(type).length === 0;
  const ordering = h(
    "select",
    { id: `${prefix}-ordering`, name: "ordering", testid: `${prefix}-ordering`, disabled: type === "pull" },
    h("option", { value: "none" }, "none: any order"),
    h("option", { value: "key" }, "key: one at a time per partitionkey / subject"),
  );
  ordering.value = sub && sub.ordering ? sub.ordering : "none";
  const limits = (sub && sub.limits) || {};
  const maxInFlight = h("input", {
    id: `${prefix}-max-in-flight`, name: "max_in_flight", type: "number", min: "1", max: "2048", step: "1",
    placeholder: "adaptive", testid: `${prefix}-max-in-flight`, disabled: type === "pull",
    value: limits.max_in_flight ?? "",
  });
  const perSecond = h("input", {
    id: `${prefix}-per-second`, name: "per_second", type: "number", min: "0.01", max: "10000", step: "any",
    placeholder: "no limit", testid: `${prefix}-per-second`, disabled: type === "pull",
    value: limits.per_second ?? "",
  });
  const title = sub ? `Change ${sub.name}` : "New subscription";
  const form = h(
    "form",
    { class: "create", testid: sub ? "edit-subscription" : "new-subscription", "aria-labelledby": `${prefix}-title`, novalidate: true },
    h("h2", { id: `${prefix}-title` }, title),
    formField(`${prefix}-name`, "Name", name),
    known,
    formField(`${prefix}-types`, "Event types (comma-separated; * for a whole segment)", typesInput, matches),
    formField(`${prefix}-origin`, "Only from producer (optional)", origin),
    formField(`${prefix}-sink`, "Destination", sinkSelect),
    sinkBox,
    formField(`${prefix}-ordering`, "Ordering", ordering),
    formField(`${prefix}-max-in-flight`, "Attempts in flight at most (empty: adaptive)", maxInFlight),
    formField(`${prefix}-per-second`, "Attempts per second at most (empty: no limit)", perSecond),
    ...filtersEditor(prefix, sub ? sub.filters : [], patterns),
    ...(sub ? simulation(sub, patterns) : []),
    h("button", { type: "submit", testid: `${prefix}-submit` }, sub ? "Save changes" : "Create"),
  );
  if (sub) showMatches();
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clearNotices();
    for (const e of form.querySelectorAll(".field-error")) { e.hidden = true; e.textContent = ""; }
    for (const e of form.querySelectorAll("[aria-invalid]")) e.removeAttribute("aria-invalid");
    let filters;
    try {
      filters = JSON.parse(document.getElementById(`${prefix}-filters`).value || "[]");
    } catch (e) {
      return showFieldError(prefix, { status: 422, message: `filters: is not JSON (${e.message})` });
    }
    const body = {
      name: name.value.trim(),
      event_types: patterns(),
      origin: origin.value.trim() || null,
      filters,
      sink: sinkValue(prefix, sinkSelect.value),
    };
    if (sinkSelect.value !== "pull") {
      body.ordering = ordering.value;
      const number = (input) => (input.value.trim() === "" ? null : Number(input.value));
      body.limits = { max_in_flight: number(maxInFlight), per_second: number(perSecond) };
    }
    if (!sub && body.origin === null) delete body.origin;
    if (sub) {
      // Only what changed.
      if (body.name === sub.name) delete body.name;
      if (JSON.stringify(body.event_types) === JSON.stringify(sub.event_types)) delete body.event_types;
      if (body.origin === (sub.origin || null)) delete body.origin;
      if (JSON.stringify(body.filters) === JSON.stringify(sub.filters || [])) delete body.filters;
      if (body.ordering === sub.ordering) delete body.ordering;
      if (body.limits && JSON.stringify(body.limits) === JSON.stringify({
        max_in_flight: limits.max_in_flight ?? null, per_second: limits.per_second ?? null,
      })) delete body.limits;
      const unchanged = sinkFields(sub.sink.type).every((f) => f.secret
        ? getPath(body.sink, f.key) === undefined
        : JSON.stringify(getPath(body.sink, f.key) ?? null) === JSON.stringify(getPath(sub.sink, f.key) ?? null));
      if (unchanged) delete body.sink;
    }
    try {
      const saved = sub
        ? await api(`/v1/subscriptions/${sub.id}`, { method: "PATCH", body })
        : await api("/v1/subscriptions", { method: "POST", body });
      await route();
      notice(`${saved.name}: ${sub ? "saved" : "created"}.`, "ok");
      for (const w of saved.warnings || []) notice(`Warning, ${w.field}: ${w.message}`, "warn");
      if (saved.signing_secret || saved.public_key) {
        secretShownOnce(saved, {
          signing_secret: saved.signing_secret, public_key: saved.public_key, previous_secret_expires_at: null,
        }, saved.public_key ? "Public key" : "Signing secret");
      }
    } catch (e) {
      if (!showFieldError(prefix, e)) notice(e.message, "error");
    }
  });
  return form;
}

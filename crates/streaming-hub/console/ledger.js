// Streaming Hub console: the ledger (docs/LEDGER.md) — the audit view of changes, newest first
// with who made them, and one entry with its inclusion proof checked here in the browser against
// the signed checkpoint (SHA-256 by the browser's own crypto, RFC 9162's verification). Loaded
// before console.js, whose helpers (h, api, table, …) it calls only at run time.
"use strict";

/** The audit log: the tenant's changes (or, for an admin acting for no tenant, the platform's). */
async function auditView() {
  const platform = state.role === "admin" && !state.tenant;
  const path = platform ? "/admin/audit" : "/v1/audit";
  const columns = [
    { title: "When", cell: (c) => time(c.recorded_at) },
    { title: "Who", cell: (c) => c.actor_label },
    { title: "What", cell: (c) => c.change.action },
    { title: "On", cell: (c) => Object.entries(c.change.target || {}).map(([k, v]) => `${k} ${v}`).join(", ") },
    { title: "Entry", cell: (c) => (platform ? `#${c.index}` : link(`#/ledger/${c.index}`, `#${c.index}`, `audit-entry-${c.index}`)) },
  ];
  const first = await api(`${path}?limit=100`);
  const t = table("audit", columns, first.items);
  let before = first.next_before;
  const more = h("button", { type: "button", testid: "audit-more", hidden: before === undefined, onclick: async () => {
    const next = await api(`${path}?limit=100&before=${before}`);
    const body = t.querySelector("tbody");
    for (const row of table("audit", columns, next.items).querySelectorAll("tbody tr")) body.append(row);
    before = next.next_before;
    more.hidden = before === undefined;
  } }, "More");
  show(
    h("h1", {}, platform ? "Audit: the platform's changes" : "Audit: changes"),
    h("p", {}, `Every change, newest first, with who made it, from the ${first.log} ledger.`),
    t,
    more,
  );
}

function fromBase64(text) {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

async function sha256(...parts) {
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  return new Uint8Array(await crypto.subtle.digest("SHA-256", all));
}

function sameBytes(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** RFC 9162 §2.1.3.2 over the answer of /v1/ledger/proof/inclusion: whether the entry's own text
 * leads to the checkpoint's root. */
async function inclusionHolds(answer) {
  const index = answer.entry.index;
  const indexBytes = new Uint8Array(8);
  new DataView(indexBytes.buffer).setBigUint64(0, BigInt(index));
  let r = await sha256(new Uint8Array([0]), indexBytes, new TextEncoder().encode(answer.entry.data));
  if (!sameBytes(r, fromBase64(answer.entry.leaf_hash))) return false;
  let f = BigInt(index);
  let s = BigInt(answer.size - 1);
  for (const p of answer.proof.map(fromBase64)) {
    if (s === 0n) return false;
    if (f & 1n || f === s) {
      r = await sha256(new Uint8Array([1]), p, r);
      while (!(f & 1n) && f !== 0n) {
        f >>= 1n;
        s >>= 1n;
      }
    } else {
      r = await sha256(new Uint8Array([1]), r, p);
    }
    f >>= 1n;
    s >>= 1n;
  }
  return s === 0n && answer.checkpoint !== undefined && sameBytes(r, fromBase64(answer.checkpoint.root));
}

/** One entry of the tenant's ledger, its proof and the checkpoint that covers it. */
async function ledgerEntryView(index) {
  const entry = await api(`/v1/ledger/entries/${encodeURIComponent(index)}`);
  const heading = h("h1", {}, `Ledger entry #${entry.index}`);
  const fields = h("pre", { testid: "ledger-entry" }, JSON.stringify(entry.entry, null, 2));
  let proofBlock;
  try {
    const answer = await api(`/v1/ledger/proof/inclusion?entry=${encodeURIComponent(index)}`);
    const holds = await inclusionHolds(answer);
    proofBlock = h(
      "section",
      { testid: "ledger-proof" },
      h("h2", {}, "Proof"),
      h("p", { class: `state ${holds ? "active" : "failed"}`, testid: "ledger-proof-result" },
        holds
          ? `Included in the tree of ${answer.size} entries signed at ${answer.checkpoint.time} (key ${answer.checkpoint.kid}): checked in this browser.`
          : "The proof does not lead to the signed checkpoint."),
      h("p", {}, `Root ${answer.checkpoint ? answer.checkpoint.root : "—"}; ${answer.proof.length} hashes. The signature is checked by streaming-hub ledger verify or the receiver packages, with the keys at /.well-known/ledger-keys.json.`),
    );
  } catch (e) {
    proofBlock = h("p", { class: "notice", testid: "ledger-proof-result" }, `No proof yet: ${e.message}`);
  }
  show(
    heading,
    h("p", {}, `${entry.kind} · recorded ${time(entry.recorded_at)} · leaf ${entry.leaf_hash}`),
    fields,
    entry.digest_key ? h("p", {}, `Digest key (for the receiver's check of what was sent): ${entry.digest_key}`) : h("p", {}, "No digest key: nothing was sent, or its event was erased."),
    proofBlock,
  );
}

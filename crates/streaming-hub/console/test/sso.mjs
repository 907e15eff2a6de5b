// People sign in to the console through the identity provider, in headless Chromium (Debian's,
// through playwright-core), against a hub and a provider tests/it/sso.rs started. Prints one JSON
// line; exits non-zero on the first failure.
//
// Input (environment): BASE (the hub), PLAYWRIGHT (the playwright-core module). The provider's
// people: ana (admin of acme, viewer of beta), vera (viewer of acme).
import assert from "node:assert/strict";
import { launch } from "./browser.mjs";

const env = process.env;
const browser = await launch();
const steps = [];
const step = (name) => steps.push(name);
const errors = [];
const created = [];
let page;

/** Signs `who` in: the console's link, the provider's login page, back to the console. */
async function signIn(who) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${env.BASE}/console`);
  await page.getByTestId("sso-signin").click();
  // The provider's own page (its development login: any password).
  await page.locator("input[name=login]").fill(who);
  await page.locator("input[name=password]").fill("any password");
  await page.locator("button[type=submit]").click();
  await page.waitForURL(`${env.BASE}/console/**`);
  await page.getByTestId("who").filter({ hasText: who }).waitFor();
  return context;
}

/** A call made from the page with the session's cookie; `csrf: false` leaves its header out. */
async function call(method, path, body, { csrf = true, tenant } = {}) {
  return page.evaluate(async ({ method, path, body, csrf, tenant }) => {
    const s = await (await fetch("/console/sso/session")).json();
    const headers = { "Content-Type": "application/json" };
    if (csrf) headers["X-CSRF-Token"] = s.csrf_token;
    if (tenant) headers["X-Streaming-Hub-Tenant"] = tenant;
    const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.status, body: await res.json().catch(() => null) };
  }, { method, path, body, csrf, tenant });
}

try {
  // ---- ana: admin of acme, viewer of beta ----
  const ana = await signIn("ana");
  const cookies = await ana.cookies();
  const session = cookies.find((c) => c.name === "__Host-streaming-hub-session");
  assert.ok(session, `the session's cookie: ${JSON.stringify(cookies.map((c) => c.name))}`);
  assert.deepEqual([session.httpOnly, session.secure, session.sameSite, session.path], [true, true, "Strict", "/"]);
  assert.ok(!cookies.some((c) => c.name === "__Host-streaming-hub-sign-in" && c.value), "the sign-in's cookie is spent");
  assert.ok(!(await page.evaluate(() => document.cookie)).includes("shcs_"), "no script reads the session");
  step("ana signed in through the provider: an HttpOnly, Secure, SameSite=Strict session");

  // Two tenants: the switcher picks one, acme first.
  const switcher = page.getByTestId("tenant-switcher");
  await switcher.waitFor();
  assert.deepEqual(await switcher.locator("option").allTextContents(), ["acme (admin)", "beta (viewer)"]);
  assert.match(await page.getByTestId("who").textContent(), /ana · admin in acme/);
  await page.getByTestId("new-name").fill("by-ana-in-the-console");
  await page.getByTestId("new-types").fill("*.*");
  await page.getByTestId("new-submit").click();
  await page.getByTestId("notice").filter({ hasText: "by-ana-in-the-console: created." }).waitFor();
  assert.match(await page.getByTestId("subscriptions").textContent(), /by-ana-in-the-console/);
  created.push("by-ana-in-the-console");
  step("ana creates a subscription in acme from the form");

  // The session's cookie alone (no CSRF header) is refused, before any handler runs.
  const forged = await call("POST", "/v1/subscriptions", { name: "forged", event_types: ["*.*"], sink: { type: "pull" } }, { csrf: false, tenant: "acme" });
  assert.deepEqual([forged.status, forged.body && forged.body.title], [403, "csrf_refused"], JSON.stringify(forged));
  const unsafeRead = await call("GET", "/v1/subscriptions", undefined, { csrf: false, tenant: "acme" });
  assert.equal(unsafeRead.status, 403, "reads need the header too");
  step("the cookie without the session's CSRF token is refused");

  // beta, where ana is a viewer: nothing to change is offered, and the API refuses it.
  await switcher.selectOption("beta");
  await page.getByTestId("who").filter({ hasText: "viewer in beta" }).waitFor();
  await page.getByTestId("read-only").waitFor();
  assert.equal(await page.getByTestId("new-name").count(), 0, "no form for a viewer");
  const refused = await call("POST", "/v1/subscriptions", { name: "by-a-viewer", event_types: ["*.*"], sink: { type: "pull" } }, { tenant: "beta" });
  assert.equal(refused.status, 403, JSON.stringify(refused));
  assert.match(refused.body.message, /admin role/);
  // A tenant ana holds no role in is refused too.
  const elsewhere = await call("GET", "/v1/subscriptions", undefined, { tenant: "gamma" });
  assert.equal(elsewhere.status, 403, JSON.stringify(elsewhere));
  step("ana in beta: a viewer, refused every write; no role in gamma");

  // Sign-out ends the session on the hub: its cookie, replayed, opens nothing.
  const csrf = (await call("GET", "/console/sso/session")).body.csrf_token;
  await page.getByTestId("signout").click();
  await page.getByTestId("signin").waitFor();
  const replayed = await fetch(`${env.BASE}/v1/subscriptions`, {
    headers: { Cookie: `${session.name}=${session.value}`, "X-CSRF-Token": csrf, "X-Streaming-Hub-Tenant": "acme" },
  });
  assert.equal(replayed.status, 401, "a signed-out session is over");
  assert.equal((await call("GET", "/console/sso/session")).status, 401);
  step("sign-out ends the session on the hub");
  await ana.close();

  // ---- vera: viewer of acme only ----
  const vera = await signIn("vera");
  await page.getByTestId("who").filter({ hasText: "vera · viewer in acme" }).waitFor();
  assert.equal(await page.getByTestId("tenant-switcher").isVisible(), false, "one tenant: no switcher");
  await page.getByTestId("subscriptions").filter({ hasText: "by-ana-in-the-console" }).waitFor();
  assert.equal(await page.getByTestId("new-name").count(), 0, "no form for a viewer");
  const write = await call("POST", "/v1/subscriptions", { name: "by-vera", event_types: ["*.*"], sink: { type: "pull" } });
  assert.equal(write.status, 403, JSON.stringify(write));
  step("vera, a viewer of acme: reads ana's subscription, refused every write");
  await vera.close();

  assert.deepEqual(errors, [], "no script errors");
  console.log(JSON.stringify({ ok: true, steps, created }));
} catch (e) {
  console.error(`console sign-in test failed after ${JSON.stringify(steps)}: ${e.stack || e}`);
  const shown = page ? await page.locator("body").textContent().catch(() => "") : "";
  console.error(`the page showed: ${shown.slice(0, 2000)}`);
  if (errors.length) console.error(`script errors: ${errors.join("; ")}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}

// Drives the console in headless Chromium (Debian's, through playwright-core) against a running
// hub that tests/it/console.rs prepared. Walks every view and action, signed in both ways, and
// checks that a tenant never sees another tenant's data. Prints one JSON line; exits non-zero on
// the first failure. With SCREENSHOTS set, saves a picture of each view there.
//
// Input (environment): BASE, ADMIN, T1_KEY, T1_HOOK, T1_EVENT, T2_EVENT, T2_NAME, WIDE_TENANT,
// EMBED (a page of another origin framing a read-only portal session of t1), RECEIVER (the
// webhook receiver's URL), AXE (axe-core's axe.min.js), PLAYWRIGHT
// (the playwright-core module), SCREENSHOTS (optional).
import assert from "node:assert/strict";
import path from "node:path";
import { launch } from "./browser.mjs";

const env = process.env;
const browser = await launch();
const steps = [];
const step = (name) => steps.push(name);

async function shot(page, name) {
  if (!env.SCREENSHOTS) return;
  await page.screenshot({ path: path.join(env.SCREENSHOTS, `${name}.png`), fullPage: true });
}

// The accessibility engine, run on every view (WCAG 2 A and AA rules).
const axeSource = env.AXE ? (await import("node:fs")).readFileSync(env.AXE, "utf8") : null;
const audited = [];

async function audit(page, view) {
  assert.ok(axeSource, "AXE (axe-core's axe.min.js) is required");
  // Evaluated through the browser's debugging protocol: the page's own policy still refuses
  // any script it did not serve.
  if (!(await page.evaluate(() => typeof window.axe === "object"))) await page.evaluate(axeSource);
  const result = await page.evaluate(async () => {
    const r = await window.axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } });
    return {
      violations: r.violations.map((v) => `${v.id}: ${v.help} (${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", ")})`),
      passed: r.passes.length,
    };
  });
  assert.deepEqual(result.violations, [], `accessibility of ${view}`);
  assert.ok(result.passed > 10, `axe checked ${view}`);
  audited.push(`${view}: ${result.passed} rules passed`);
}

async function signIn(page, token) {
  await page.goto(`${env.BASE}/console`);
  await page.getByTestId("token").fill(token);
  await page.getByTestId("signin-submit").click();
}

async function noticeText(page) {
  const n = page.getByTestId("notice").first();
  await n.waitFor();
  return n.textContent();
}

// The page under test, whose view is printed when a step fails.
let page;
const errors = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("dialog", (d) => d.accept());

  // ---- A read-only portal session, embedded in another origin's page (it expires soon) ----
  await page.goto(env.EMBED);
  const portal = page.frameLocator("iframe#portal");
  await portal.getByTestId("read-only").waitFor();
  assert.match(await portal.getByTestId("who").textContent(), /t1 · read-only portal until/);
  assert.match(await portal.getByTestId("subscriptions").textContent(), /hook/);
  // Who paces each destination (one replica for the install), beside its allowance.
  assert.match(await portal.getByTestId("subscriptions").textContent(), /paced by \S+:\d+/);
  assert.equal(await portal.getByTestId(`toggle-${env.T1_HOOK}`).count(), 0, "no action offered");
  assert.equal(await portal.getByTestId("new-subscription").count(), 0, "no form offered");
  assert.ok(!(await portal.locator("body").textContent()).includes(env.T2_NAME), "another tenant's data");
  // Calling the API anyway changes nothing.
  const framed = page.frames().find((f) => f.url().includes("/console/"));
  const refused = await framed.evaluate(async (id) => {
    const r = await fetch(`/v1/subscriptions/${id}`, {
      method: "PATCH",
      headers: { Authorization: `Bearer ${sessionStorage.getItem("sh.token")}`, "Content-Type": "application/json" },
      body: JSON.stringify({ enabled: false }),
    });
    return [r.status, (await r.json()).title];
  }, env.T1_HOOK);
  assert.deepEqual(refused, [403, "portal_session_refused"]);
  assert.ok(!framed.url().includes("shpg_"), "the grant left the address");
  await shot(page, "portal-embedded");
  step("an embedded read-only portal: its tenant only, nothing can be changed");
  // The session expires: the next view says so.
  const deadline = Date.now() + 30_000;
  for (let i = 0; (await portal.getByTestId("session-ended").count()) === 0; i++) {
    assert.ok(Date.now() < deadline, "the portal session did not end");
    // Moving between two views: each move reads the API again.
    await portal.getByTestId(i % 2 ? "nav-subscriptions" : "nav-events").click().catch(() => {});
    await page.waitForTimeout(500);
  }
  await shot(page, "portal-ended");
  step("the portal session expires");

  // A token that is neither the admin's nor a key.
  await signIn(page, "not-a-token-at-all");
  assert.match(await noticeText(page), /not accepted/);
  step("a bad token is refused");
  await shot(page, "sign-in");
  await audit(page, "sign-in");

  // ---- The operator ----
  await signIn(page, env.ADMIN);
  await page.getByTestId("tenants").waitFor();
  assert.match(await page.getByTestId("who").textContent(), /admin/);
  const t1Row = page.getByTestId("tenants").locator("tr", { hasText: "t1" });
  assert.match(await t1Row.textContent(), /t1/);
  assert.match(await page.getByTestId("tenants").textContent(), /t2/);
  await shot(page, "tenants");
  await audit(page, "tenants");
  step("admin: tenants");

  await page.getByTestId("nav-all-subscriptions").click();
  await page.getByTestId("all-subscriptions").waitFor();
  const all = await page.getByTestId("all-subscriptions").textContent();
  assert.ok(all.includes("hook") && all.includes(env.T2_NAME), all);
  await shot(page, "all-subscriptions");
  step("admin: every subscription");

  await page.getByTestId("nav-quarantine").click();
  await page.getByTestId("quarantine").waitFor();
  assert.match(await page.getByTestId("quarantine").textContent(), /invalid_attribute|invalid_header|ce-type|ce-/);
  await shot(page, "quarantine");
  step("admin: quarantine with reasons");

  await page.getByTestId("nav-dlq").click();
  await page.getByTestId("dlq").waitFor();
  assert.match(await page.getByTestId("dlq").textContent(), /the ledger did not answer/);
  await shot(page, "dlq");
  step("admin: DLQ records");

  await page.getByTestId("nav-catalog").click();
  await page.getByTestId("manifests").waitFor();
  assert.match(await page.getByTestId("manifests").textContent(), /ledger · ledger-api/);
  assert.match(await page.getByTestId("type-account.created").textContent(), /An account was opened\.[\s\S]*declared/);
  assert.match(await page.getByTestId("type-loan_application.approved").textContent(), /seen/);
  await shot(page, "catalog");
  await audit(page, "catalog");
  step("admin: catalog with its manifest source");

  // Acting for a tenant whose id has capitals, dots, underscores and dashes (sent encoded).
  await page.getByTestId("nav-tenants").click();
  await page.getByTestId(`tenant-${env.WIDE_TENANT}`).click();
  await page.getByTestId("subscriptions").waitFor();
  assert.match(await page.getByTestId("subscriptions").textContent(), /wide-tenant-pull/);
  assert.ok((await page.getByTestId("who").textContent()).includes(env.WIDE_TENANT));
  step("admin acting for a tenant named with every character the grammar allows");

  // A tenant with 150 subscriptions: a page of 100, then the rest on demand.
  await page.getByTestId("nav-tenants").click();
  await page.getByTestId("tenant-t-many").click();
  await page.getByTestId("subscriptions").waitFor();
  const rows = () => page.getByTestId("subscriptions").locator("tbody tr").count();
  assert.equal(await rows(), 100);
  await page.getByTestId("subscriptions-more").click();
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=subscriptions] tbody tr").length === 150);
  assert.ok(await page.getByTestId("subscriptions-more").isHidden(), "no more pages");
  step("subscriptions a page at a time");

  // Acting for t1: its subscriptions, with health and actions.
  await page.getByTestId("nav-tenants").click();
  await page.getByTestId("tenant-t1").click();
  await page.getByTestId("subscriptions").waitFor();
  assert.match(await page.getByTestId("who").textContent(), /acting for t1/);
  const row = page.getByTestId(`sub-${env.T1_HOOK}`);
  assert.match(await row.textContent(), /active/);
  assert.match(await row.textContent(), /closed/);
  assert.match(await row.textContent(), /1 filter/);
  assert.match(await row.textContent(), /webhook · http:\/\/127\.0\.0\.1/);
  const kafka = page.getByTestId(`sub-${env.T1_KAFKA}`);
  assert.match(await kafka.textContent(), /kafka · lerian\.events at kafka-1\.example\.com:9093 \(TLS\)/);
  assert.ok(!(await page.content()).includes("console-kafka-secret"), "a sink's password is never shown");
  await shot(page, "subscriptions");
  step("admin acting for t1: subscriptions");

  // Creating a subscription: the known types offered as the patterns are typed, a refused field
  // shown beside its input, a pattern no producer declares warned of.
  await page.getByTestId("new-name").fill("from-the-form");
  await page.getByTestId("new-types").fill("account.*, acount.created");
  const matches = await page.getByTestId("new-types-matches").textContent();
  assert.match(matches, /account\.\* matches account\.created \(An account was opened\.\)/);
  assert.match(matches, /acount\.created matches no known type/);
  await page.getByTestId("new-sink").selectOption("webhook");
  await page.getByTestId("new-sink-url").fill("ftp://files.example.com/in");
  await page.getByTestId("new-submit").click();
  await page.getByTestId("new-sink-url-error").waitFor();
  assert.match(await page.getByTestId("new-sink-url-error").textContent(), /^sink\.url: /);
  assert.equal(await page.getByTestId("new-sink-url").getAttribute("aria-invalid"), "true");
  await shot(page, "new-subscription-refused");
  // The field fixed, with HTTP Basic beside the signature but its password forgotten: refused at
  // the password's input.
  await page.getByTestId("new-sink-url").fill(`${env.RECEIVER}/from-the-form`);
  await page.getByTestId("new-sink-auth-type").selectOption("basic");
  await page.getByTestId("new-sink-auth-username").fill("streaming-hub");
  await page.getByTestId("new-submit").click();
  await page.getByTestId("new-sink-auth-password-error").waitFor();
  assert.match(await page.getByTestId("new-sink-auth-password-error").textContent(), /^sink\.auth\.password: is required/);
  // Given: created, and the new signing secret shown this once; the password never.
  await page.getByTestId("new-sink-auth-password").fill("console-basic-password");
  await page.getByTestId("new-submit").click();
  await page.getByTestId("secret").waitFor();
  const formSecret = await page.getByTestId("secret-value").textContent();
  assert.ok(formSecret.length >= 24, formSecret);
  await page.getByTestId("secret-close").click();
  assert.ok(!(await page.content()).includes(formSecret), "the secret is shown once only");
  const created = page.getByTestId("notice").filter({ hasText: "from-the-form: created." });
  await created.waitFor();
  assert.match(await page.getByTestId("notice").filter({ hasText: "Warning" }).textContent(), /event_types\[1\]/);
  assert.match(await page.getByTestId("subscriptions").textContent(), /from-the-form/);
  assert.ok(!(await page.content()).includes("console-basic-password"), "a webhook's password is never shown");
  await shot(page, "new-subscription");
  await audit(page, "subscriptions with the form");
  step("create a webhook from the form: refused fields fixed, basic auth, the secret shown once, a warned pattern");

  // Every sink type has its fields: an SQS queue with credentials (never shown again).
  await page.getByTestId("new-name").fill("to-sqs");
  await page.getByTestId("new-types").fill("loan_application.*");
  await page.getByTestId("new-sink").selectOption("sqs");
  await page.getByTestId("new-sink-queue_url").fill("https://sqs.us-east-1.amazonaws.com/123456789012/ledger");
  await page.getByTestId("new-sink-region").fill("us-east-1");
  await page.getByTestId("new-sink-credentials-access_key_id").fill("AKIAIOSFODNN7EXAMPLE");
  await page.getByTestId("new-sink-credentials-secret_access_key").fill("console-sqs-secret");
  await shot(page, "new-subscription-sqs");
  await page.getByTestId("new-submit").click();
  await page.getByTestId("notice").filter({ hasText: "to-sqs: created." }).waitFor();
  assert.match(await page.getByTestId("subscriptions").textContent(), /sqs · https:\/\/sqs\.us-east-1\.amazonaws\.com\/123456789012\/ledger/);
  assert.ok(!(await page.content()).includes("console-sqs-secret"), "a credential is never shown");
  step("create an SQS subscription: its own fields, its credentials never shown");

  // Keyless: an SNS topic reached through a role the hub assumes; the role is shown again on edit.
  await page.getByTestId("new-name").fill("to-sns-keyless");
  await page.getByTestId("new-types").fill("loan_application.*");
  await page.getByTestId("new-sink").selectOption("sns");
  await page.getByTestId("new-sink-topic_arn").fill("arn:aws:sns:us-east-1:123456789012:ledger");
  await page.getByTestId("new-sink-region").fill("us-east-1");
  await page.getByTestId("new-sink-credentials-web_identity-role_arn").fill("arn:aws:iam::123456789012:role/hub");
  await page.getByTestId("new-submit").click();
  await page.getByTestId("notice").filter({ hasText: "to-sns-keyless: created." }).waitFor();
  step("create an SNS subscription that assumes a role: no key asked");

  // A field holding a document (a key file, PEM certificates) is a text area, from its schema.
  await page.getByTestId("new-sink").selectOption("pubsub");
  const tagOf = (id) => page.getByTestId(id).evaluate((e) => e.tagName);
  assert.equal(await tagOf("new-sink-credentials_json"), "TEXTAREA");
  assert.equal(await tagOf("new-sink-project"), "INPUT");
  await page.getByTestId("new-sink").selectOption("webhook");
  assert.equal(await tagOf("new-sink-tls-ca_pem"), "TEXTAREA");
  await page.getByTestId("new-sink").selectOption("pull");
  step("a key file or a PEM bundle is written in a text area");

  // From the keyboard alone: type, Tab from field to field, Enter on Create.
  await page.getByTestId("new-name").focus();
  await page.keyboard.type("by-keyboard");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.dataset.testid), "new-types");
  await page.keyboard.type("loan_application.*");
  const focused = () => page.evaluate(() => document.activeElement && document.activeElement.dataset.testid);
  for (let i = 0; i < 20 && (await focused()) !== "new-submit"; i++) await page.keyboard.press("Tab");
  assert.equal(await focused(), "new-submit", "Create is reached with Tab");
  await page.keyboard.press("Enter");
  await page.getByTestId("notice").filter({ hasText: "by-keyboard: created." }).waitFor();
  step("create a subscription from the keyboard alone");

  // Changing one: its filters tested live against a sample event, then saved; then deleted.
  await page.getByTestId("subscriptions").getByRole("row", { name: /to-sqs/ }).getByRole("link", { name: "Deliveries" }).click();
  await page.getByTestId("edit-open").click();
  const sample = page.getByTestId("edit-sample");
  await page.waitForFunction(() => document.querySelector("[data-testid=edit-sample]").value.includes("loan_application"));
  await page.getByTestId("edit-filters").fill('[{"exact": {"source": "lender"}}]');
  await page.getByTestId("edit-filters-result").filter({ hasText: "The sample event matches: #1 matches." }).waitFor();
  await page.getByTestId("edit-filters").fill('[{"sql": "source = \'crm\'"}]');
  await page.getByTestId("edit-filters-result").filter({ hasText: "does not match" }).waitFor();
  assert.ok((await sample.inputValue()).includes('"type": "studio.lerian.lender.loan_application.approved"'));
  // Before saving, what the change would have matched of the last day: nothing from crm.
  await page.getByTestId("edit-simulate").click();
  await page.getByTestId("edit-simulation").filter({ hasText: "with these changes" }).waitFor();
  assert.match(
    await page.getByTestId("edit-simulation").textContent(),
    /^Last 24 hours: [1-9][0-9]* events matched now, 0 with these changes \([1-9][0-9]* only now, 0 only with the changes\)\.$/,
  );
  await shot(page, "edit-filters");
  await page.getByTestId("edit-filters").fill('[{"exact": {"source": "lender"}}]');
  await page.getByTestId("edit-ordering").selectOption("key");
  await page.getByTestId("edit-submit").click();
  await page.getByTestId("notice").filter({ hasText: "to-sqs: saved." }).waitFor();
  assert.match(await page.getByTestId("filters").textContent(), /"exact"[\s\S]*lender/);
  await page.getByTestId("edit-open").click();
  await page.getByTestId("edit-filters").fill('[{"sql": "source = "}]');
  await page.getByTestId("edit-submit").click();
  await page.getByTestId("edit-filters-error").waitFor();
  assert.match(await page.getByTestId("edit-filters-error").textContent(), /^filters\[0\]/);
  await page.getByTestId("delete").click();
  await page.getByTestId("notice").filter({ hasText: "to-sqs: deleted." }).waitFor();
  assert.ok(!(await page.getByTestId("subscriptions").textContent()).includes("to-sqs"));
  step("change a subscription (filters tested live, the change previewed, ordering), a refused filter shown, delete it");

  await page.getByTestId("nav-event-types").click();
  await page.getByTestId("event-types").waitFor();
  assert.match(await page.getByTestId("type-account.created").textContent(), /An account was opened\./);
  assert.match(await page.getByTestId("type-loan_application.approved").textContent(), /lender 1\.0\.0[\s\S]*seen/);
  await shot(page, "event-types");
  await audit(page, "event types");
  step("tenant's event types: declared and seen");
  await page.getByTestId("nav-subscriptions").click();
  await page.getByTestId("subscriptions").waitFor();

  await page.getByTestId(`toggle-${env.T1_HOOK}`).click();
  assert.match(await noticeText(page), /paused/);
  assert.match(await page.getByTestId(`sub-${env.T1_HOOK}`).textContent(), /no \(disabled through the API\)/);
  await page.getByTestId(`toggle-${env.T1_HOOK}`).click();
  assert.match(await noticeText(page), /resumed/);
  step("pause and resume");

  await page.getByTestId(`verify-${env.T1_HOOK}`).click();
  assert.match(await noticeText(page), /verified/);
  step("verify");

  await page.getByTestId(`test-${env.T1_HOOK}`).click();
  assert.match(await noticeText(page), /hook: test event delivered \(HTTP 204, \d+ ms\)/);
  step("send a test event, see its outcome");

  await page.getByTestId(`rotate-${env.T1_HOOK}`).click();
  await page.getByTestId("secret").waitFor();
  const secret = await page.getByTestId("secret-value").textContent();
  assert.ok(secret.length >= 24, secret);
  await shot(page, "rotated-secret");
  await page.getByTestId("secret-close").click();
  assert.equal(await page.getByTestId("secret").count(), 0);
  assert.ok(!(await page.content()).includes(secret), "the secret is shown once only");
  step("rotate secret, shown once");

  await page.getByTestId(`deliveries-${env.T1_HOOK}`).click();
  await page.getByTestId("deliveries").waitFor();
  assert.match(await page.getByTestId("deliveries").textContent(), /succeeded/);
  assert.match(await page.getByTestId("filters").textContent(), /"prefix"[\s\S]*studio\.lerian\./);
  assert.match(await page.getByTestId("destination").textContent(), /url\s*http:\/\/127\.0\.0\.1/);
  assert.match(await page.getByTestId("ordering").textContent(), /Ordering: none/);
  await shot(page, "deliveries");
  // The subscription's statistics, drawn in the page: its deliveries of the last hour, then day.
  const attempts = page.getByTestId("chart-deliveries").locator("svg[role=img]");
  assert.match(await attempts.getAttribute("aria-label"), /Attempts per minute: [1-9]\d* delivered, [1-9]\d* failed, \d+ dead-lettered/);
  assert.match(await page.getByTestId("chart-latency").locator("svg[role=img]").getAttribute("aria-label"), /p99 up to \d+ ms/);
  assert.ok((await page.getByTestId("chart-deliveries").locator("rect").count()) > 1, "bars drawn");
  if (env.SCREENSHOTS) await page.getByTestId("stats").screenshot({ path: path.join(env.SCREENSHOTS, "stats.png") });
  await page.getByTestId("edit-open").click();
  await audit(page, "one subscription, its charts and its form");
  await page.getByTestId("edit-open").click();
  await page.getByTestId("stats-24h").click();
  await page.getByTestId("stats").getByText("Statistics, last day").waitFor();
  assert.equal(await page.getByTestId("stats-24h").getAttribute("aria-pressed"), "true");
  step("a subscription's statistics: attempts, latency and backlog per minute, last hour and day");
  await page.getByTestId("redrive").click();
  assert.match(await noticeText(page), /dead-lettered deliveries are pending again/);
  step("deliveries with attempts; redrive");

  // The ledger: an attempt's entry, its inclusion proof checked in the browser against the signed
  // checkpoint; then the audit view of changes with who made them.
  await page.locator('ol.attempts a[data-testid^="ledger-"]').first().click();
  await page.getByTestId("ledger-entry").waitFor();
  assert.match(await page.getByTestId("ledger-entry").textContent(), /"kind": "delivery"[\s\S]*"subscription_id"/);
  await page.getByTestId("ledger-proof-result").getByText(/checked in this browser/).waitFor({ timeout: 15000 });
  await audit(page, "a ledger entry and its proof");
  await page.getByTestId("nav-audit").click();
  await page.getByTestId("audit").waitFor();
  const changes = await page.getByTestId("audit").textContent();
  assert.match(changes, /subscription\.secret_rotated/);
  assert.match(changes, /subscription\.created/);
  assert.doesNotMatch(changes, new RegExp(env.T2_NAME), "another tenant's changes are not shown");
  step("the ledger: an attempt's entry with its proof checked; the audit view");
  await page.evaluate((id) => { location.hash = `#/subscriptions/${id}`; }, env.T1_HOOK);
  await page.getByTestId("transform-code").waitFor();

  // A transform: tried against the latest event of its types, refused when it throws, saved, removed.
  await page.getByTestId("transform-code").fill("function handler(e) { console.log('seen', e.type); e.data = { mapped: true }; return e; }");
  await page.getByTestId("transform-run").click();
  await page.getByTestId("transform-result").getByText(/"mapped": true/).waitFor();
  const tried = await page.getByTestId("transform-result").textContent();
  assert.match(tried, /"x-lerian-event-id"/, "shown the headers the webhook would send");
  assert.match(tried, /console\.log:\s*seen /);
  await page.getByTestId("transform-code").fill("function handler(e) { throw new Error('nope'); }");
  await page.getByTestId("transform-run").click();
  await page.getByTestId("transform-result").getByText(/Error: the handler threw: nope/).waitFor();
  await page.getByTestId("transform-code").fill("function handler(e) { return e; }");
  await page.getByTestId("transform-save").click();
  assert.match(await noticeText(page), /transform saved/);
  assert.equal(await page.getByTestId("transform-code").inputValue(), "function handler(e) { return e; }");
  await audit(page, "a subscription with its transform");
  await page.getByTestId("transform-remove").click();
  assert.match(await noticeText(page), /transform removed/);
  assert.equal(await page.getByTestId("transform-remove").count(), 0);
  step("a transform tried against the latest event of its types, saved and removed");

  await page.getByTestId("replay-from-seq").fill("1");
  await page.getByTestId("replay-submit").click();
  assert.match(await noticeText(page), /Replay .* started/);
  step("replay");

  await page.getByTestId("nav-events").click();
  await page.getByTestId("events").waitFor();
  await page.getByTestId(`event-${env.T1_EVENT}`).waitFor();
  await shot(page, "events");
  await page.getByTestId(`event-${env.T1_EVENT}`).click();
  await page.getByTestId("fanout").waitFor();
  const fanout = await page.getByTestId("fanout").textContent();
  assert.ok(fanout.includes("hook") && /succeeded|pending|leased/.test(fanout), fanout);
  await page.getByTestId("payload").waitFor();
  await shot(page, "event");
  step("event log and one event's fan-out");

  // Searching the log: by type pattern and producer, then a type nobody sent, then by id.
  await page.getByTestId("nav-events").click();
  await page.getByTestId("event-search").waitFor();
  await page.getByTestId("search-type").fill("loan_application.*");
  await page.getByTestId("search-source").fill("lender");
  await page.getByTestId("search-submit").click();
  await page.waitForURL(/#\/events\?type=loan_application\.\*&source=lender/);
  // The list is drawn again with the searched type only (the hub's own notices are gone).
  await page.waitForFunction(() => {
    const t = document.querySelector("[data-testid=events]");
    return t && !t.textContent.includes("streaming_hub.") && t.textContent.includes("loan_application.approved");
  });
  await page.getByTestId(`event-${env.T1_EVENT}`).waitFor();
  await shot(page, "event-search");
  await audit(page, "event log search");
  await page.getByTestId("search-type").fill("account.created");
  await page.getByTestId("search-submit").click();
  await page.getByTestId("events").getByText("Nothing here.").waitFor();
  await page.getByTestId("search-id").fill(env.T1_EVENT);
  await page.getByTestId("search-id-submit").click();
  await page.getByTestId("fanout").waitFor();
  step("event search: by type and producer, and by id");

  // ---- A tenant ----
  await page.getByTestId("signout").click();
  await signIn(page, env.T1_KEY);
  await page.getByTestId("subscriptions").waitFor();
  assert.match(await page.getByTestId("who").textContent(), /tenant API key/);
  assert.equal(await page.getByTestId("nav-tenants").count(), 0, "no operator views for a tenant");
  for (const view of ["#/subscriptions", "#/events", "#/event-types", "#/tenants", "#/all-subscriptions", "#/quarantine", "#/dlq"]) {
    await page.goto(`${env.BASE}/console${view}`);
    await page.locator("main h1").first().waitFor();
    const html = await page.content();
    assert.ok(!html.includes(env.T2_NAME) && !html.includes(env.T2_EVENT), `t2's data shown to t1 at ${view}`);
  }
  await page.goto(`${env.BASE}/console#/events/${env.T2_EVENT}`);
  assert.match(await noticeText(page), /not found|No such/i);
  assert.ok(!(await page.content()).includes(env.T2_NAME));
  step("tenant: own data only, another tenant's event is not found");

  assert.deepEqual(errors, [], "no script errors");
  console.log(JSON.stringify({ ok: true, steps, audited }));
} catch (e) {
  console.error(`console test failed after ${JSON.stringify(steps)}: ${e.stack || e}`);
  const shown = page ? await page.locator("main").textContent().catch(() => "") : "";
  console.error(`the page showed: ${shown.slice(0, 2000)}`);
  if (errors.length) console.error(`script errors: ${errors.join("; ")}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}

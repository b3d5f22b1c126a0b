// Access: the page sends the bearer token the user entered (kept for the
// tab) with every request, and says what to do when the server refuses.
// The refusals come from routes the test puts in front of the real server
// (server/ui_test.go checks the server's own refusals).
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { browser, shot, startNode } from "./helpers.mjs";

let node, ctx;
before(async () => {
  node = await startNode();
  ctx = await browser();
});
after(async () => {
  await ctx?.close();
  await node?.kill();
});

test("the page sends the token it was given and explains a refusal", async () => {
  const page = await ctx.newPage();
  const seen = [];
  page.on("request", (r) => {
    if (r.url().includes("/ui/api/")) seen.push([new URL(r.url()).pathname, r.headers()["authorization"] ?? ""]);
  });
  await page.goto(node.url("/ui/"));
  await page.waitForSelector("body[data-loaded=true]");
  assert.ok(seen.length > 0 && seen.every(([, a]) => a === ""), `requests without a token: ${JSON.stringify(seen)}`);

  // Refused: the page says so and asks for a token with read permission.
  await page.route("**/ui/api/**", (route) => route.fulfill({ status: 401, body: "unauthenticated" }));
  await page.fill("#token", "secret-read-token");
  await Promise.all([page.waitForEvent("load"), page.click("#auth button[type=submit]")]);
  await page.waitForFunction(() => document.querySelector("#auth-msg")?.textContent?.includes("read permission"), null, { timeout: 5000 });
  assert.equal(await page.locator("#conn").getAttribute("data-state"), "auth");
  // Nothing could be read: the page says so, and does not say there are
  // no leases.
  await page.waitForSelector("#leases-denied:not([hidden])", { timeout: 5000 });
  assert.equal(await page.locator("#leases-denied").textContent(), "Leases cannot be shown: the server wants a token; enter one above.");
  await assertNoLeasesClaimed(page);
  await shot(page, "auth-refused");

  // Accepted: every request carries the token, kept across a reload.
  await page.unroute("**/ui/api/**");
  seen.length = 0;
  await page.reload();
  await page.waitForSelector("#conn[data-state=live]", { timeout: 5000 });
  await page.click('nav a[data-view="cluster"]');
  await page.waitForSelector("#members tbody tr");
  assert.ok(seen.length >= 2, `requests: ${JSON.stringify(seen)}`);
  for (const [path, auth] of seen) assert.equal(auth, "Bearer secret-read-token", `${path} sent ${JSON.stringify(auth)}`);

  // Forgotten: no header again.
  await Promise.all([page.waitForEvent("load"), page.click("#token-clear")]);
  await page.waitForSelector("#conn[data-state=live]", { timeout: 5000 });
  const req = page.waitForRequest((r) => r.url().includes("/ui/api/cluster"));
  await page.click('nav a[data-view="leases"]');
  await page.click('nav a[data-view="cluster"]');
  assert.equal((await req).headers()["authorization"], undefined);
});

test("a page opened as /ui/?prefix= asks the server for that prefix only", async () => {
  const page = await ctx.newPage();
  const asked = [];
  page.on("request", (r) => {
    if (r.url().includes("/ui/api/stream")) asked.push(new URL(r.url()).searchParams.get("prefix"));
  });
  await page.goto(node.url("/ui/?prefix=demo/scoped/"));
  await page.waitForSelector("#conn[data-state=live]", { timeout: 5000 });
  assert.deepEqual(asked, ["demo/scoped/"]);
  assert.equal(await page.inputValue("#prefix"), "demo/scoped/");

  // A role that covers only a prefix is refused the whole page (403):
  // the page says how to open it for that prefix.
  await page.route("**/ui/api/**", (route) => route.fulfill({ status: 403, body: "permission_denied" }));
  await page.goto(node.url("/ui/"));
  await page.waitForFunction(() => document.querySelector("#auth-msg")?.textContent?.includes("/ui/?prefix="), null, { timeout: 5000 });
  // The views say that nothing can be shown, and why.
  await page.waitForSelector("#leases-denied:not([hidden])", { timeout: 5000 });
  assert.equal(await page.locator("#leases-denied").textContent(), "Leases cannot be shown: this token may not list leases.");
  await assertNoLeasesClaimed(page);
  await shot(page, "auth-forbidden");
  await page.click('nav a[data-view="events"]');
  assert.equal(await page.locator("#events-denied").textContent(), "Events cannot be shown: this token may not read the events.");
  assert.equal(await page.locator("#events").isVisible(), false, "the events table is shown");
  await page.close();
});

/** assertNoLeasesClaimed fails if the page claims there are no leases, or
 * shows their (empty) table, while it may not read them. */
async function assertNoLeasesClaimed(page) {
  const count = (await page.locator("#lease-count").textContent()) ?? "";
  assert.doesNotMatch(count, /live leases/, `the page says "${count}" without having read the leases`);
  assert.equal(await page.locator("#leases-empty").isVisible(), false, "the page says \"No live leases.\" without having read them");
  assert.equal(await page.locator("#leases-scroll").isVisible(), false, "the (empty) leases table is shown");
}

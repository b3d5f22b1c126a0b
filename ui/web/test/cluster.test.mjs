// The cluster view of a real three-node cluster: every member with its
// role, the leader marked; when the leader is killed, the page (served by
// a follower) shows the new leader and the old one unreachable.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { browser, cliOK, shot, startCluster } from "./helpers.mjs";

let nodes = [], ctx;
after(async () => {
  await ctx?.close();
  await Promise.all(nodes.map((n) => n.kill()));
});

test("killing the leader of a 3-node cluster shows the new leader", async () => {
  nodes = await startCluster(3);
  await cliOK(nodes.map((n) => n.api).join(","), ["acquire", "svc/scheduler", "--holder", "node-a", "--ttl", "30s"]);
  ctx = await browser();
  const page = await ctx.newPage();
  page.on("pageerror", (e) => console.error("page error:", e));
  const leaderRow = "#members tbody tr[data-leader=true]";

  // Open the cluster view on a follower and read the leader from it (if
  // leadership moved to the page's own node meanwhile, go to another).
  let oldLeader, leader, follower;
  for (let attempt = 0; ; attempt++) {
    const c = await (await fetch(nodes[0].url("/ui/api/cluster"))).json();
    follower = nodes.find((n) => n.id !== c.leader_id);
    await page.goto(follower.url("/ui/#cluster"));
    await page.waitForSelector(leaderRow, { timeout: 10_000 });
    oldLeader = await page.locator(leaderRow).getAttribute("data-member");
    leader = nodes.find((n) => n.id === oldLeader);
    if (leader !== follower || attempt === 3) break;
  }
  assert.ok(leader && leader !== follower, `leader ${oldLeader}, page on ${follower.id}`);
  assert.equal(await page.locator("#members tbody tr").count(), 3);
  for (const n of nodes) {
    assert.match(await page.locator(`#members tr[data-member="${n.id}"] .role`).textContent(), n.id === oldLeader ? /^leader/ : /^follower/);
  }
  await shot(page, "cluster");

  const killed = Date.now();
  await leader.kill();
  await page.waitForFunction((old) => {
    const r = document.querySelector("#members tbody tr[data-leader=true]");
    return r && r.dataset.member !== old;
  }, oldLeader, { timeout: 15_000 });
  const newLeader = await page.locator("#members tbody tr[data-leader=true]").getAttribute("data-member");
  console.log(`# new leader ${newLeader} shown ${Date.now() - killed}ms after ${oldLeader} was killed`);
  assert.notEqual(newLeader, oldLeader);
  await page.waitForSelector(`#members tbody tr[data-member="${oldLeader}"].down`, { timeout: 5000 });
  assert.match(await page.locator("#leader-changes").textContent(), new RegExp(`${oldLeader} .*(→ ${newLeader}|no leader)`));
  await shot(page, "cluster-failover");
});

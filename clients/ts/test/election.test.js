// Two processes run runElection on one name against a real tenured; the
// leader is killed with SIGKILL and the other leads within TTL + 1s with a
// larger token.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createInterface } from "node:readline";
import { join } from "node:path";
import { startNode, eventually, pkgDir, spawnGroup, killGroup } from "./helpers/tenured.js";

let node;
const procs = [];
after(async () => {
  for (const p of procs) killGroup(p);
  await node?.kill();
});

/** candidate starts a leader process and collects its events. */
function candidate(endpoint, holder, ttl) {
  const p = spawnGroup(process.execPath, [join(pkgDir, "test/fixtures/leader.mjs"), endpoint, "svc/leader", holder, String(ttl)], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  procs.push(p);
  p.events = [];
  p.stderrText = "";
  p.stderr.on("data", (b) => (p.stderrText += b));
  createInterface({ input: p.stdout }).on("line", (line) => {
    const ev = JSON.parse(line);
    ev.at = performance.now();
    p.events.push(ev);
  });
  p.holder = holder;
  return p;
}

const leading = (p) => p.events.filter((e) => e.event === "leading");

test("two runElection processes: the leader is SIGKILLed and the other leads within TTL + 1s with a larger token", async (t) => {
  node = await startNode();
  const TTL = 2000;
  const a = candidate(node.api, "proc-a", TTL);
  const b = candidate(node.api, "proc-b", TTL);
  const [leader, follower] = await eventually("one of the two processes to lead", 15_000, async () => {
    for (const p of [a, b]) assert.equal(p.exitCode, null, `${p.holder} exited: ${p.stderrText}`);
    if (leading(a).length > 0) return [a, b];
    if (leading(b).length > 0) return [b, a];
    throw new Error("no process leads yet");
  });
  // Both run; exactly one leads, and the other saw it as the new leader.
  const first = leading(leader)[0];
  await eventually(`${follower.holder} to see ${leader.holder} as the leader`, 5000, async () => {
    assert.ok(follower.events.some((e) => e.event === "new-leader" && e.leader === leader.holder && e.token === first.token));
  });
  assert.equal(leading(follower).length, 0);

  leader.kill("SIGKILL");
  const killedAt = performance.now();
  const next = await eventually(`${follower.holder} to lead after ${leader.holder} was killed`, TTL + 5000, async () => {
    const l = leading(follower)[0];
    if (!l) throw new Error(`events: ${follower.events.map((e) => e.event)}`);
    return l;
  });
  const took = next.at - killedAt;
  t.diagnostic(`${follower.holder} led ${Math.round(took)}ms after ${leader.holder} was killed (token ${first.token} -> ${next.token})`);
  assert.ok(took < TTL + 1000, `took ${took}ms, more than TTL + 1s`);
  assert.ok(BigInt(next.token) > BigInt(first.token), `token ${next.token} after ${first.token}`);
  assert.ok(!follower.events.some((e) => e.event === "write-refused"), "the new leader's writes were accepted");

  follower.kill("SIGTERM");
  await eventually(`${follower.holder} to step down and exit on SIGTERM`, 5000, async () => {
    assert.ok(follower.events.some((e) => e.event === "exit"), `events: ${follower.events.map((e) => e.event)}`);
  });
  assert.ok(follower.events.some((e) => e.event === "stopped"));
});

// The TypeScript example of fence/redisfence/scripts/README.md, as
// written there: type-checked against node-redis's declarations,
// compiled, and run against Redis (127.0.0.1:6379, or TENURE_TEST_REDIS as
// host:port, as for the Go tests) with node-redis from the
// devDependencies. The README's block defines r (a connected client) and
// writeReport; the driver below writes with tokens 8, 7 (late) and 9.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { createClient } from "redis";
import { repoDir } from "./helpers/tenured.js";
import { blockUnder, tsProject, tsc } from "./helpers/snippets.js";

const redisURL = `redis://${process.env.TENURE_TEST_REDIS || "127.0.0.1:6379"}`;

const driver = `
const lease = process.env.LEASE as string;
const out: Record<string, unknown> = {};
await writeReport(lease, 8n, "from token 8");
try {
  await writeReport(lease, 7n, "late, from token 7");
  out.stale = null;
} catch (e) {
  out.stale = (e as Error).message;
  out.cause = String(((e as Error).cause as Error | undefined)?.message);
  out.causeIsErrorReply = (e as Error).cause instanceof ErrorReply;
}
out.afterStale = await r.get(\`report:{\${lease}}\`);
await writeReport(lease, 9n, "from token 9");
out.value = await r.get(\`report:{\${lease}}\`);
out.fence = await r.get(\`tenure:fence:{\${lease}}\`);
console.log(JSON.stringify(out));
r.destroy();
`;

let rdb;
const leases = [];
after(async () => {
  if (rdb) {
    for (const l of leases) await rdb.del([`tenure:fence:{${l}}`, `report:{${l}}`]);
    rdb.destroy();
  }
});

test("the Redis scripts' TypeScript example type-checks and fences writes against Redis", async (t) => {
  rdb = createClient({ url: redisURL });
  rdb.on("error", () => {});
  await rdb.connect().catch((err) => {
    assert.fail(`Redis is not reachable at ${redisURL}: ${err.message}; start it (.ci/run does: redis-server --daemonize yes --port 6379) or set TENURE_TEST_REDIS to host:port`);
  });
  const md = readFileSync(join(repoDir, "fence/redisfence/scripts/README.md"), "utf8");
  const block = blockUnder(md, "From TypeScript (node-redis)", "ts");
  const dir = tsProject({ "example.ts": block.code + driver });
  try {
    tsc(dir);
  } catch (err) {
    assert.fail(`the README's TypeScript example (its line ${block.line} on) does not type-check:\n${err.output}\n${block.code}`);
  }
  const lease = `readme-ts/${randomBytes(6).toString("hex")}`;
  leases.push(lease);
  let out;
  try {
    // From the repository's root, as the example's path to set.lua assumes.
    out = execFileSync(process.execPath, [join(dir, "out/example.js")], {
      cwd: repoDir,
      encoding: "utf8",
      timeout: 60_000,
      env: { ...process.env, LEASE: lease, REDIS_URL: redisURL },
    });
  } catch (err) {
    assert.fail(`the README's TypeScript example failed (${err.message}):\n${err.stdout}${err.stderr}`);
  }
  t.diagnostic(out.trim());
  const got = JSON.parse(out);
  assert.deepEqual(got, {
    stale: "a newer holder wrote (highest token 8)",
    cause: "TENURE_STALE 8",
    causeIsErrorReply: true,
    afterStale: "from token 8",
    value: "from token 9",
    fence: "9",
  });
});

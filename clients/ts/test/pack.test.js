// The package as its users get it: npm pack makes a tarball, a separate
// Node project installs it, type-checks a TypeScript file against its
// declarations and uses it against a real tenured.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startNode, tempDir, pkgDir } from "./helpers/tenured.js";

let node;
after(async () => {
  await node?.kill();
});

const npm = (args, cwd) => execFileSync("npm", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });

test("npm pack makes a tarball that a separate project installs, type-checks and uses", async (t) => {
  const out = tempDir("tenure-ts-pack-");
  // dist is built by npm test; prepack would build it again.
  const [packed] = JSON.parse(npm(["pack", "--json", "--ignore-scripts", "--pack-destination", out], pkgDir));
  const files = packed.files.map((f) => f.path);
  t.diagnostic(`${packed.filename}: ${files.length} files, ${packed.size} bytes`);
  for (const f of ["dist/node.js", "dist/node.d.ts", "dist/web.js", "dist/web.d.ts", "dist/gen/tenure/v1/tenure_pb.js", "README.md", "package.json"]) {
    assert.ok(files.includes(f), `${f} in the tarball`);
  }
  assert.ok(!files.some((f) => f.startsWith("test/") || f.startsWith("node_modules/")), "no tests or dependencies in the tarball");

  const app = tempDir("tenure-ts-app-");
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
  npm(["install", "--no-audit", "--no-fund", "--prefer-offline", join(out, packed.filename)], app);
  writeFileSync(join(app, "main.ts"), `
import { createClient, StaleTokenError, type Grant, type Lease } from "@tenure-io/client";
const c = createClient({ endpoints: ["127.0.0.1:7400"] });
const g: Grant = await c.acquire("app/x", "app", 2000);
const token: bigint = g.token;
const s = c.session({ ttlMs: 2000 });
const l: Lease = await s.acquire("app/y");
const signal: AbortSignal = l.signal;
console.log(token, signal.aborted, StaleTokenError.name);
`);
  writeFileSync(join(app, "tsconfig.json"), JSON.stringify({
    compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true, noEmit: true, skipLibCheck: false, types: [], lib: ["ES2022", "DOM"] },
    files: ["main.ts"],
  }));
  try {
    execFileSync(process.execPath, [join(pkgDir, "node_modules/typescript/bin/tsc"), "-p", app], { encoding: "utf8" });
  } catch (err) {
    assert.fail(`type-checking a program against the installed package:\n${err.stdout}${err.stderr}`);
  }

  node = await startNode();
  writeFileSync(join(app, "main.mjs"), `
import { createClient, StaleTokenError } from "@tenure-io/client";
const c = createClient({ endpoints: [process.env.TENURE_ENDPOINTS] });
const s = c.session({ holder: "app", ttlMs: 2000 });
const l = await s.acquire("app/lock");
await l.put("app/data", "from the packed client");
await l.release();
const stale = await c.put("app/data", "late", "app/lock", l.token).catch((e) => e);
const kv = await c.kvGet("app/data");
console.log(JSON.stringify({ token: String(l.token), state: l.state, stale: stale instanceof StaleTokenError, value: new TextDecoder().decode(kv.value) }));
await s.close();
c.close();
`);
  const res = JSON.parse(execFileSync(process.execPath, [join(app, "main.mjs")], { cwd: app, encoding: "utf8", env: { ...process.env, TENURE_ENDPOINTS: node.api } }));
  assert.deepEqual(res, { token: res.token, state: "released", stale: true, value: "from the packed client" });
  assert.ok(Number(res.token) > 0);
  const installed = JSON.parse(readFileSync(join(app, "node_modules/@tenure-io/client/package.json"), "utf8"));
  assert.equal(installed.name, "@tenure-io/client");
});

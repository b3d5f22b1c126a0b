// Runs the TypeScript client's tests: builds tenured and tenure once (go
// build from the repository root) into a temporary directory, then runs every
// test/*.test.js with Node's test runner, one file at a time (the
// real-process tests are timing-sensitive and the machine may be small).
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const repo = resolve(pkg, "../..");
const dir = mkdtempSync(join(tmpdir(), "tenure-ts-tenured-"));
let code = 1;
try {
  const bin = join(dir, "tenured");
  const t0 = Date.now();
  execFileSync("go", ["build", "-o", dir, "./cmd/tenured", "./cmd/tenure"], { cwd: repo, stdio: "inherit" });
  console.log(`built tenured and tenure in ${((Date.now() - t0) / 1000).toFixed(1)}s`);
  const only = process.argv.slice(2);
  const files = only.length > 0 ? only : readdirSync(join(pkg, "test")).filter((f) => f.endsWith(".test.js")).sort().map((f) => join("test", f));
  const r = spawnSync(process.execPath, ["--test", "--test-concurrency=1", "--test-timeout=120000", ...files], {
    cwd: pkg,
    stdio: "inherit",
    env: { ...process.env, TENURED_BIN: bin, TENURE_BIN: join(dir, "tenure"), NODE_NO_WARNINGS: "1" },
  });
  code = r.status ?? 1;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
process.exit(code);

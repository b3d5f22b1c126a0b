// Runs the dashboard's browser tests: builds tenured and tenure once (go
// build from the repository root) into a temporary directory, then runs
// every test/*.test.mjs with Node's test runner, one file at a time.
// Screenshots go to $UI_ARTIFACTS (default: a new temporary directory,
// printed). (The docs' screenshots come from screenshots.mjs.)
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const web = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const repo = resolve(web, "../..");
const dir = mkdtempSync(join(tmpdir(), "tenure-ui-bin-"));
const artifacts = process.env.UI_ARTIFACTS || mkdtempSync(join(tmpdir(), "tenure-ui-artifacts-"));
mkdirSync(artifacts, { recursive: true });
console.log(`screenshots and measurements go to ${artifacts}`);
let code = 1;
try {
  const t0 = Date.now();
  for (const name of ["tenured", "tenure"]) {
    execFileSync("go", ["build", "-o", join(dir, name), "./cmd/" + name], { cwd: repo, stdio: "inherit" });
  }
  console.log(`built tenured and tenure in ${((Date.now() - t0) / 1000).toFixed(1)}s`);
  const only = process.argv.slice(2);
  const files = only.length > 0 ? only : readdirSync(join(web, "test")).filter((f) => f.endsWith(".test.mjs")).sort().map((f) => join("test", f));
  const r = spawnSync(process.execPath, ["--test", "--test-concurrency=1", "--test-timeout=180000", ...files], {
    cwd: web,
    stdio: "inherit",
    env: { ...process.env, TENURED_BIN: join(dir, "tenured"), TENURE_BIN: join(dir, "tenure"), UI_ARTIFACTS: artifacts, NODE_NO_WARNINGS: "1" },
  });
  code = r.status ?? 1;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(`screenshots and measurements are in ${artifacts}`);
process.exit(code);

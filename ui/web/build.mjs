// Builds the dashboard into ../dist (which Go embeds): type-checks the
// TypeScript, bundles src/app.ts and src/app.css with esbuild and copies
// src/index.html. With --check it builds into a temporary directory and
// fails if the result differs from the committed ../dist.
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const dist = resolve(here, "../dist");
const check = process.argv.includes("--check");
const out = check ? mkdtempSync(join(tmpdir(), "tenure-ui-")) : dist;

execFileSync(process.execPath, [join(here, "node_modules/typescript/bin/tsc"), "-p", join(here, "tsconfig.json")], { stdio: "inherit" });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(here, "src/app.ts"), join(here, "src/app.css")],
  outdir: out,
  bundle: true,
  minify: true,
  format: "esm",
  target: ["es2022"],
  legalComments: "none",
  logLevel: "warning",
});
copyFileSync(join(here, "src/index.html"), join(out, "index.html"));

if (check) {
  const a = readdirSync(out).sort(), b = readdirSync(dist).sort();
  const bad = [...new Set([...a, ...b])].filter((f) => {
    try {
      return !readFileSync(join(out, f)).equals(readFileSync(join(dist, f)));
    } catch {
      return true;
    }
  });
  rmSync(out, { recursive: true, force: true });
  if (bad.length) {
    console.error(`ui/dist is not what ui/web/src builds to (differs: ${bad.join(", ")}): run "npm run build" in ui/web and commit ui/dist`);
    process.exit(1);
  }
  console.log("ui/dist matches the sources");
}

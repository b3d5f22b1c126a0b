// Every ```ts block of README.md type-checks against the package's own
// declarations (dist/*.d.ts, as npm test builds them), resolved through the
// package's name and exports as a user's project resolves them: the blocks
// under "In a browser" with the "browser" condition (dist/web.d.ts), the
// others as in Node.js (dist/node.d.ts). Each block is a module of its own
// (top-level await allowed); the few names the text around a block
// defines (client, signal, endpoints) are declared globally. The ```js
// blocks are excerpts of the examples, which examples.test.js checks and
// the tests run.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readdirSync, readFileSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { pkgDir } from "./helpers/tenured.js";
import { codeBlocks, tsProject, tsc } from "./helpers/snippets.js";

const globals = `// The names the README's text gives the blocks.
declare const client: import("@tenure-io/client").Client;
declare const signal: AbortSignal;
declare const endpoints: string[];
`;

// project makes a project of blocks with the package installed under its
// name (a link to this directory) beside its dependencies.
function project(blocks, compilerOptions) {
  const files = { "globals.d.ts": globals };
  for (const b of blocks) files[b.file] = `${b.code}export {};\n`;
  const dir = tsProject(files, { noEmit: true, ...compilerOptions }, { linkModules: false });
  const nm = join(dir, "node_modules");
  mkdirSync(join(nm, "@tenure-io"), { recursive: true });
  for (const entry of readdirSync(join(pkgDir, "node_modules"))) {
    if (entry !== "@tenure-io") symlinkSync(join(pkgDir, "node_modules", entry), join(nm, entry));
  }
  symlinkSync(pkgDir, join(nm, "@tenure-io/client"), "dir");
  return dir;
}

// readmeLines rewrites tsc's positions in the block files into README.md's
// lines.
function readmeLines(output, blocks) {
  return output.replace(/(?:\S*\/)?(block\d+)\.ts\((\d+),(\d+)\)/g, (m, name, row, col) => {
    const b = blocks.find((x) => x.file === `${name}.ts`);
    return b ? `README.md:${b.line + Number(row) - 1}:${col}` : m;
  });
}

test("every ts block of README.md type-checks against the package's declarations", () => {
  const md = readFileSync(join(pkgDir, "README.md"), "utf8");
  const blocks = codeBlocks(md, "ts").map((b, i) => ({ ...b, file: `block${i + 1}.ts` }));
  assert.ok(blocks.length >= 5, `README.md has ${blocks.length} ts blocks; expected the five or more it had`);
  const browser = blocks.filter((b) => b.heading === "In a browser");
  const nodeBlocks = blocks.filter((b) => b.heading !== "In a browser");
  assert.equal(browser.length, 1, "one ts block under \"In a browser\"");
  const failures = [];
  for (const [which, bs, opts] of [
    ["Node.js", nodeBlocks, {}],
    ["browser", browser, { customConditions: ["browser"], types: [] }],
  ]) {
    const dir = project(bs, opts);
    try {
      tsc(dir);
    } catch (err) {
      failures.push(`README.md's ts blocks (${which}) do not type-check:\n${readmeLines(err.output ?? err.message, bs)}`);
    }
  }
  assert.deepEqual(failures, []);
});

// Code blocks of Markdown files, and TypeScript projects that type-check
// (and compile) them against this package's dependencies, so that a README
// and the tests that run its examples cannot drift apart.
import { execFileSync } from "node:child_process";
import { symlinkSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { pkgDir, tempDir } from "./tenured.js";

/** codeBlocks returns the fenced code blocks of markdown in language lang,
 * each with the line its code starts on and the heading it is under. */
export function codeBlocks(markdown, lang) {
  const blocks = [];
  let heading = "";
  const lines = markdown.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (/^#{1,6} /.test(line)) heading = line.replace(/^#+ /, "");
    const open = /^```(\S*)\s*$/.exec(line);
    if (!open) continue;
    let j = i + 1;
    while (j < lines.length && lines[j] !== "```") j++;
    if (j === lines.length) throw new Error(`the code block on line ${i + 1} does not end`);
    if (open[1] === lang) blocks.push({ code: lines.slice(i + 1, j).join("\n") + "\n", line: i + 2, heading });
    i = j;
  }
  return blocks;
}

/** blockUnder returns the only code block in language lang under heading
 * (one of codeBlocks'). */
export function blockUnder(markdown, heading, lang) {
  const found = codeBlocks(markdown, lang).filter((b) => b.heading === heading);
  if (found.length !== 1) throw new Error(`${found.length} \`\`\`${lang} blocks under the heading "${heading}", want 1`);
  return found[0];
}

/** tsProject writes files (name -> text) into a new directory, an ES
 * module project with a strict tsconfig.json (compilerOptions are added
 * to it) and, unless linkModules is false, this package's node_modules (so
 * imports of its dependencies resolve). It returns the directory. */
export function tsProject(files, compilerOptions = {}, { linkModules = true } = {}) {
  const dir = tempDir("tenure-ts-snippets-");
  if (linkModules) symlinkSync(join(pkgDir, "node_modules"), join(dir, "node_modules"), "dir");
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "snippets", private: true, type: "module" }));
  writeFileSync(
    join(dir, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        lib: ["ES2022", "DOM"],
        types: ["node"],
        strict: true,
        skipLibCheck: true,
        outDir: "out",
        ...compilerOptions,
      },
      files: Object.keys(files),
    }),
  );
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, name)), { recursive: true });
    writeFileSync(join(dir, name), text);
  }
  return dir;
}

/** tsc runs the package's TypeScript compiler on the project in dir and
 * returns its output; it throws with that output when it fails. */
export function tsc(dir) {
  try {
    return execFileSync(process.execPath, [join(pkgDir, "node_modules/typescript/bin/tsc"), "-p", dir], { encoding: "utf8" });
  } catch (err) {
    const e = new Error(`tsc -p ${dir} failed:\n${err.stdout ?? ""}${err.stderr ?? ""}`);
    e.output = `${err.stdout ?? ""}${err.stderr ?? ""}`;
    throw e;
  }
}

// Regenerates src/gen from the repository's proto/ with protoc and
// protoc-gen-es (a dev dependency): npm run generate. protoc must be on
// PATH (or set PROTOC); its google/protobuf includes are found next to it.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { dirname, join, resolve } from "node:path";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const protoDir = resolve(pkg, "../../proto");
const plugin = join(pkg, "node_modules/.bin/protoc-gen-es");
execFileSync(process.env.PROTOC ?? "protoc", [
  `--plugin=protoc-gen-es=${plugin}`,
  `-I${protoDir}`,
  `--es_out=${join(pkg, "src/gen")}`,
  "--es_opt=target=ts,import_extension=js",
  "tenure/v1/tenure.proto",
], { stdio: "inherit" });

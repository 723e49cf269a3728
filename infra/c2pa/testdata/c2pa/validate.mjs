// validate reads files with the reference C2PA implementation and prints
// each one's manifest store as JSON (the active manifest, its assertions
// and every validation status), or {"error": "..."} when it has none.
// Usage: node validate.mjs FORMAT FILE [ANCHORS] reads one file, FORMAT a
// MIME type and ANCHORS a PEM file of trust anchors the reader trusts
// (settings' trust.trust_anchors). Without arguments it serves: each line
// of its input is a JSON request {"format", "file", "anchors"} and each
// answer one line of its output, in order, until its input ends — one
// process (and one compile of the WebAssembly module) for a whole test run.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { createInterface } from "node:readline";
import { initSync, WasmReader } from "@contentauth/c2pa-wasm";

const require = createRequire(import.meta.url);
initSync({ module: readFileSync(require.resolve("@contentauth/c2pa-wasm/c2pa.wasm")) });

async function validate(format, file, anchors) {
  try {
    const context = anchors ? JSON.stringify({ trust: { trust_anchors: readFileSync(anchors, "utf8") } }) : null;
    const reader = await WasmReader.fromBytes(format, new Uint8Array(readFileSync(file)), context);
    return JSON.stringify(JSON.parse(reader.json()));
  } catch (e) {
    return JSON.stringify({ error: String(e) });
  }
}

const args = process.argv.slice(2);
if (args.length > 0) {
  process.stdout.write(await validate(...args));
} else {
  for await (const line of createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    const req = JSON.parse(line);
    process.stdout.write((await validate(req.format, req.file, req.anchors)) + "\n");
  }
}

// validate reads one file with the reference C2PA implementation and
// prints its manifest store as JSON (the active manifest, its assertions
// and every validation status), or {"error": "..."} when it has none.
// Usage: node validate.mjs FORMAT FILE [ANCHORS], FORMAT a MIME type and
// ANCHORS a PEM file of trust anchors the reader trusts (settings'
// trust.trust_anchors).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { initSync, WasmReader } from "@contentauth/c2pa-wasm";

const require = createRequire(import.meta.url);
const [format, file, anchors] = process.argv.slice(2);
initSync({ module: readFileSync(require.resolve("@contentauth/c2pa-wasm/c2pa.wasm")) });
try {
  const context = anchors ? JSON.stringify({ trust: { trust_anchors: readFileSync(anchors, "utf8") } }) : null;
  const reader = await WasmReader.fromBytes(format, new Uint8Array(readFileSync(file)), context);
  process.stdout.write(reader.json());
} catch (e) {
  process.stdout.write(JSON.stringify({ error: String(e) }));
}

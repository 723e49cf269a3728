#!/usr/bin/env bash
# ui-vendor (make ui-vendor): installs the frontend's pinned third-party
# packages (web/uideps, its lockfile) and copies their ES-module
# builds into web/ui/vendor, which is embedded and served as is: the
# frontend has no build step. With --check it writes into a temporary
# folder and fails when the committed copies differ (CI runs it in lint).
set -euo pipefail
cd "$(dirname "$0")/.."
src=web/uideps
out=web/ui/vendor
if [ "${1:-}" = --check ]; then out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; fi
npm ci --prefix "$src" --no-audit --no-fund --loglevel=error >/dev/null
mkdir -p "$out"
m="$src/node_modules"
cp "$m/marked/lib/marked.esm.js" "$out/marked.js"
cp "$m/dompurify/dist/purify.es.mjs" "$out/purify.js"
cp "$m/@highlightjs/cdn-assets/es/highlight.min.js" "$out/highlight.js"
{
  echo "Third-party modules vendored by scripts/ui-vendor.sh, with their licenses."
  for p in marked dompurify @highlightjs/cdn-assets; do
    echo; echo "== $p $(node -p "require('./$m/$p/package.json').version")"
    cat "$m/$p/LICENSE"
  done
} > "$out/LICENSES.txt"
# The vendored modules carry no source maps: the page's CSP and the
# embedded assets serve only what is listed here.
sed -i '/^\/\/# sourceMappingURL=/d' "$out/marked.js" "$out/purify.js" "$out/highlight.js"
if [ "${1:-}" = --check ]; then
  if ! diff -r "$out" web/ui/vendor >/dev/null; then
    echo "ui-vendor: web/ui/vendor differs from the pinned packages: run make ui-vendor and commit" >&2
    diff -r "$out" web/ui/vendor | head -20 >&2
    exit 1
  fi
  echo "ui-vendor: web/ui/vendor matches the pinned packages"
fi

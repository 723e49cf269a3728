#!/usr/bin/env bash
# ui-vendor (make ui-vendor): installs the frontend's pinned third-party
# packages (web/uideps, its lockfile) and copies their ES-module
# builds into web/ui/vendor, which is embedded and served as is: the
# frontend has no build step. The accessibility checker the browser tests
# run (axe-core) goes to e2e/vendor, embedded by the tests' helper and
# never served. With --check it writes into a temporary folder and fails
# when the committed copies differ (CI runs it in lint).
set -euo pipefail
cd "$(dirname "$0")/.."
src=web/uideps
out=web/ui/vendor
testout=e2e/vendor
if [ "${1:-}" = --check ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  out=$tmp/ui testout=$tmp/e2e
fi
npm ci --prefix "$src" --no-audit --no-fund --loglevel=error >/dev/null
mkdir -p "$out" "$testout"
m="$src/node_modules"
cp "$m/marked/lib/marked.esm.js" "$out/marked.js"
cp "$m/dompurify/dist/purify.es.mjs" "$out/purify.js"
cp "$m/@highlightjs/cdn-assets/es/highlight.min.js" "$out/highlight.js"
cp "$m/@xterm/xterm/lib/xterm.mjs" "$out/xterm.js"
cp "$m/@xterm/xterm/css/xterm.css" "$out/xterm.css"
cp "$m/@xterm/addon-fit/lib/addon-fit.mjs" "$out/xterm-fit.js"
{
  echo "Third-party modules vendored by scripts/ui-vendor.sh, with their licenses."
  for p in marked dompurify @highlightjs/cdn-assets @xterm/xterm @xterm/addon-fit; do
    echo; echo "== $p $(node -p "require('./$m/$p/package.json').version")"
    cat "$m/$p/LICENSE"
  done
} > "$out/LICENSES.txt"
cp "$m/axe-core/axe.min.js" "$testout/axe.min.js"
{
  echo "The accessibility checker vendored by scripts/ui-vendor.sh for the browser tests, with its license."
  echo; echo "== axe-core $(node -p "require('./$m/axe-core/package.json').version")"
  cat "$m/axe-core/LICENSE"
} > "$testout/LICENSES.txt"
# The vendored modules carry no source maps: the page's CSP and the
# embedded assets serve only what is listed here.
sed -i '/^\/\/# sourceMappingURL=/d' "$out/marked.js" "$out/purify.js" "$out/highlight.js" "$out/xterm.js" "$out/xterm-fit.js"
if [ "${1:-}" = --check ]; then
  for pair in "$out web/ui/vendor" "$testout e2e/vendor"; do
    set -- $pair
    if ! diff -r "$1" "$2" >/dev/null; then
      echo "ui-vendor: $2 differs from the pinned packages: run make ui-vendor and commit" >&2
      diff -r "$1" "$2" | head -20 >&2
      exit 1
    fi
  done
  echo "ui-vendor: web/ui/vendor and e2e/vendor match the pinned packages"
fi

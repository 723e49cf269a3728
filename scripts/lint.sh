#!/usr/bin/env bash
# lint: gofmt, go vet and the dependency rule of ARCHITECTURE.md, for code
# and tests alike (a test's imports are the package's imports):
#   - domain imports only the standard library and domain;
#   - app never imports infra or web; web never imports infra;
#   - only infra/sandbox/docker imports the Docker SDK (github.com/docker/...).
# Each violation is printed as "<package> (<file>) imports <import>".
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
unformatted=$(gofmt -l $(git ls-files '*.go' ; git ls-files --others --exclude-standard '*.go') 2>/dev/null || true)
if [ -n "$unformatted" ]; then echo "gofmt: needs formatting:"; echo "$unformatted"; fail=1; fi
go vet ./... || fail=1

# imports PATTERNS...: one line "<package> <dir> <kind> <import>" per import
# of the packages, kind "code" or "test" (in-package and external tests).
imports() {
	go list -f '{{$p := .ImportPath}}{{$d := .Dir}}{{range .Imports}}{{$p}} {{$d}} code {{.}}
{{end}}{{range .TestImports}}{{$p}} {{$d}} test {{.}}
{{end}}{{range .XTestImports}}{{$p}} {{$d}} test {{.}}
{{end}}' "$@"
}

# where DIR KIND IMPORT: the files of the package in DIR that import IMPORT.
where() {
	local files
	if [ "$2" = test ]; then files=("$1"/*_test.go); else files=($(ls "$1"/*.go | grep -v '_test\.go$')); fi
	grep -lF "\"$3\"" "${files[@]}" 2>/dev/null | xargs -r -n1 basename | paste -sd, -
}

# Known violations, as "<package> <kind> <import>", reported but not failed:
# each goes with its fix. app/workspace's turn_test.go runs the turn use case
# over the real store and blob store; it moves out with the rewrite of
# app/workspace under way (issue 14), which owns that folder now.
allowed=(
	"threadbox/app/workspace test threadbox/infra/blob"
	"threadbox/app/workspace test threadbox/infra/store"
)

# rule TITLE PATTERNS -- TEST: prints TITLE and every import for which the
# awk condition TEST (over $1 package, $4 import) holds.
rule() {
	local title=$1 cond
	shift
	local pkgs=()
	while [ "$1" != -- ]; do pkgs+=("$1"); shift; done
	cond=$2
	local bad=""
	local known=""
	while read -r pkg dir kind imp; do
		local line="$pkg ($(where "$dir" "$kind" "$imp")) imports $imp"
		if printf '%s\n' "${allowed[@]}" | grep -qxF "$pkg $kind $imp"; then
			known+="$line"$'\n'
		else
			bad+="$line"$'\n'
		fi
	done < <(imports "${pkgs[@]}" | awk "$cond")
	if [ -n "$known" ]; then
		echo "dependency rule: $title: known violations, allowed until fixed (scripts/lint.sh):"
		printf '%s' "$known"
	fi
	if [ -n "$bad" ]; then
		echo "dependency rule: $title:"
		printf '%s' "$bad"
		fail=1
	fi
}

if [ -n "$(go list ./domain/... 2>/dev/null)" ]; then
	rule "domain must import only the standard library and domain (tests too)" ./domain/... -- \
		'$4 ~ /^[^\/]*\./ || ($4 ~ /^threadbox\// && $4 !~ /^threadbox\/domain(\/|$)/)'
fi
if [ -n "$(go list ./app/... ./web/... 2>/dev/null)" ]; then
	rule "web and app must not import infra, app must not import web (tests too)" ./app/... ./web/... -- \
		'$4 ~ /^threadbox\/infra(\/|$)/ || ($1 ~ /^threadbox\/app(\/|$)/ && $4 ~ /^threadbox\/web(\/|$)/)'
fi
rule "only threadbox/infra/sandbox/docker imports the Docker SDK (tests too)" ./... -- \
	'$4 ~ /^github\.com\/docker\// && $1 != "threadbox/infra/sandbox/docker"'
exit $fail

#!/usr/bin/env bash
# lint: gofmt, go vet and the dependency rule of the layout (README,
# Architecture), for code and tests alike (a test's imports are the
# package's imports):
#   - domain imports only the standard library and domain;
#   - app never imports infra or web; web never imports infra;
#   - only infra/sandbox/docker imports the Docker SDK (github.com/docker/...);
#   - no use case imports a sibling use case only for its sentinel errors.
# Each violation is printed as "<package> (<file>) imports <import>".
# Then the repository's files (tracked, and new ones not ignored; the
# vendored frontend modules left out):
#   - no file points outside the repository (the shared folder beside the
#     checkout, or the internal product contract and package map by name);
#   - no issue numbers or work-log stops in code, comments, docs, scripts or
#     test names, on one line or wrapped across two.
# Each hit is printed as "<file>:<line>: <text>".
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

# rule TITLE PATTERNS -- TEST: prints TITLE and every import for which the
# awk condition TEST (over $1 package, $4 import) holds.
rule() {
	local title=$1 cond
	shift
	local pkgs=()
	while [ "$1" != -- ]; do pkgs+=("$1"); shift; done
	cond=$2
	local bad=""
	while read -r pkg dir kind imp; do
		bad+="$pkg ($(where "$dir" "$kind" "$imp")) imports $imp"$'\n'
	done < <(imports "${pkgs[@]}" | awk "$cond")
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

# used DIR KIND IMPORT: the identifiers of IMPORT that the package's files in
# DIR (of KIND) use, one per line: every "name.Ident" outside comments, where
# name is the import's local name in that file (its alias, or the imported
# package's name).
used() {
	local name alias f
	name=$(go list -f '{{.Name}}' "$3" 2>/dev/null) || return 0
	for f in $(where "$1" "$2" "$3" | tr , ' '); do
		alias=$(sed -n -E "s/^[[:space:]]*(import[[:space:]]+)?([A-Za-z_][A-Za-z0-9_]*)[[:space:]]+\"${3//\//\\/}\".*/\2/p" "$1/$f" | head -1)
		[ "$alias" != import ] || alias=""
		sed 's://.*$::' "$1/$f" | grep -oE "\b${alias:-$name}\.[A-Za-z_][A-Za-z0-9_]*" | sed 's/^[^.]*\.//' || true
	done | sort -u
}

# A use case is a folder under app/ (its subpackages belong to it). A use
# case that imports a sibling only for its sentinel errors (exported names
# Err...) couples two use cases for a value: the sentinel belongs where both
# can import it (domain, or the package that declares the port). Each
# (package, code or tests, import) is judged by every identifier its files
# use of the import.
if [ -n "$(go list ./app/... 2>/dev/null)" ]; then
	bad=""
	while read -r pkg dir kind imp; do
		ids=$(used "$dir" "$kind" "$imp")
		[ -n "$ids" ] || continue
		if ! grep -qv '^Err' <<<"$ids"; then
			bad+="$pkg ($(where "$dir" "$kind" "$imp")) imports $imp only for $(paste -sd, - <<<"$ids")"$'\n'
		fi
	done < <(imports ./app/... | awk '$4 ~ /^threadbox\/app\// { split($1, a, "/"); split($4, b, "/"); if (a[3] != b[3]) print }' | sort -u)
	if [ -n "$bad" ]; then
		echo "dependency rule: a use case must not import a sibling use case only for its sentinel errors (tests too):"
		printf '%s' "$bad"
		fail=1
	fi
fi

# The repository's own files: tracked, and new ones not yet ignored. The
# vendored frontend modules are third-party code and left out.
mapfile -t files < <({ git ls-files; git ls-files --others --exclude-standard; } 2>/dev/null | grep -v '^web/ui/vendor/' | sort -u)

# scan TITLE ERE: prints TITLE and every line of the repository's text files
# that matches ERE (case ignored) and fails.
scan() {
	local hits
	[ ${#files[@]} -gt 0 ] || return 0
	hits=$(printf '%s\0' "${files[@]}" | xargs -0 -r grep -nIiE -- "$2" 2>/dev/null || true)
	if [ -n "$hits" ]; then
		echo "$1:"
		printf '%s\n' "$hits"
		fail=1
	fi
}

# Nothing points outside the repository: a clone has to stand alone. The
# API's reference is docs/api.md and the served OpenAPI document.
scan "files must not point outside the repository (docs/api.md is the API's reference)" \
	'[.][.]/shared|/work[/]shared|CONTRACT([.]md|[[:space:]]*§)|ARCHITECTURE[.]md'

# Comments, docs and test names say what the code does and why, not which
# issue or work session asked for it: those numbers mean nothing to a reader
# of the repository.
scan "no issue numbers or work-log stops in code, comments, docs or test names" \
	'(^|[^[:alnum:]_])(issues?[[:space:]_#-]*|stops?[[:space:]_#-]+)[0-9]+|(Test|Fuzz|Benchmark|Example)[[:alnum:]_]*(Issue|Stop)_?[0-9]+'
# The same across a line break: a wrapped comment or paragraph ("issue" at
# the end of one line, the number on the next behind a comment marker).
if [ ${#files[@]} -gt 0 ]; then
	hits=$(printf '%s\0' "${files[@]}" | xargs -0 -r perl -0777 -ne '
		next if /\0/;
		while (/(?<![[:alnum:]_])((?:issues?|stops?)[ \t#-]*\r?\n[ \t]*(?:\/\/+|#+|\*|--|>)?[ \t]*[0-9]+)/gi) {
			(my $m = $1) =~ s/\s+/ /g; print "$ARGV: $m\n";
		}' 2>/dev/null || true)
	if [ -n "$hits" ]; then
		echo "no issue numbers or work-log stops in code, comments, docs or test names (across a line break):"
		printf '%s\n' "$hits"
		fail=1
	fi
fi
exit $fail

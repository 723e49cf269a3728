#!/usr/bin/env bash
# lint: gofmt, go vet and the dependency rule of ARCHITECTURE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
unformatted=$(gofmt -l $(git ls-files '*.go' ; git ls-files --others --exclude-standard '*.go') 2>/dev/null || true)
if [ -n "$unformatted" ]; then echo "gofmt: needs formatting:"; echo "$unformatted"; fail=1; fi
go vet ./... || fail=1
# domain imports only the standard library (and other domain packages).
bad=$(go list -f '{{.ImportPath}}: {{join .Imports " "}}' ./domain/... | awk -F': ' '{n=split($2,a," "); for(i=1;i<=n;i++){ if (a[i] ~ /\./ || (a[i] ~ /^threadbox\// && a[i] !~ /^threadbox\/domain\//)) print $1" imports "a[i]}}')
if [ -n "$bad" ]; then echo "dependency rule: domain must import only the standard library:"; echo "$bad"; fail=1; fi
# app never imports infra or web; web never imports infra.
bad=$(go list -f '{{.ImportPath}}: {{join .Imports " "}}' ./web/... ./app/... 2>/dev/null | awk -F': ' '{n=split($2,a," "); for(i=1;i<=n;i++){ if (a[i] ~ /^threadbox\/infra/) print $1" imports "a[i]; if ($1 ~ /^threadbox\/app/ && a[i] ~ /^threadbox\/web/) print $1" imports "a[i]}}')
if [ -n "$bad" ]; then echo "dependency rule: web and app must not import infra:"; echo "$bad"; fail=1; fi
exit $fail

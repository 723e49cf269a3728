// Package maketest tests the Makefile targets that are scripts: `make lint`
// (scripts/lint.sh: the dependency rules over code and tests, and the rules
// on what the repository's files may name) and `make run` (which hands the
// machine to `threadbox dev`), and the microVM guest's build
// (sandbox/microvm-guest.sh: offline, and which builds it keeps), with
// stand-ins for apt, and that `make test` (scripts/test.sh) reports what
// its run left behind and nothing else. Each test copies the
// Makefile and the script into a small module of its own in a temporary
// folder and really runs make (or the script) there.
package maketest

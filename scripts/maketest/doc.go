// Package maketest tests the Makefile targets that are scripts: `make lint`
// (scripts/lint.sh, the dependency rule over code and tests) and `make run`
// (which lists the local development jail explicitly). Each test copies the
// Makefile and the script into a small module of its own in a temporary
// folder and really runs make there.
package maketest

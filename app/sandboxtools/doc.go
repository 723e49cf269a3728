// Package sandboxtools executes the sandbox_v1 tools (docs/api.md) —
// sandbox_bash, repl_execute, exec_command, write_stdin, edit_file and
// bsl_check — in a container's sandbox, and bridges the product's API into
// the sandbox (Bridge): a loopback listener inside the sandbox whose
// connections the host serves with the product's /api/gpt/ routes only.
package sandboxtools

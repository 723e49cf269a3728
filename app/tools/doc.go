// Package tools is the tool kit of the Messages API: it runs the server
// tools' calls in a container's sandbox, over the Sandbox and Files ports
// it declares (served by app/containers and infra/fsroot). One Executor
// serves both tool families:
//
//   - the code-execution sub-tools: bash_code_execution,
//     text_editor_code_execution and, under code_execution_20260120 and
//     later, code_execution (Python in a persistent interpreter per
//     container, codeexec.go; its client tools callable from code, pausing
//     the cell until the client's results resume it);
//   - the sandbox_v1 tools (docs/sandbox-tools.md): sandbox_bash,
//     repl_execute, exec_command, write_stdin, edit_file and bsl_check.
//
// The families share one Python driver and interpreter manager
// (python.go), one editor (editor.go, with exact, whitespace-tolerant and
// near matching in match.go), one input decoder (input.go) and one Config.
//
// Decisions where the contract is silent:
//
//   - A timed-out command's stderr keeps what the command wrote and ends in
//     "Command timed out after Ns."; a command killed for memory gets a note.
//   - The text editor answers a missing file with error code file_not_found
//     ("File not found: <absolute path>"), a path refused by the mount table
//     with invalid_tool_input and the contract's exact string, and an
//     absent or repeated old_str with invalid_tool_input.
//   - insert answers with a text_editor_code_execution_str_replace_result
//     whose lines are the inserted lines ("+..."), old_lines 0.
//   - Viewing a directory lists its entries one a line, folders ending in
//     "/", as file_type "text"; binary files are refused.
//   - str_replace's diff covers the whole lines the replacement touched.
package tools

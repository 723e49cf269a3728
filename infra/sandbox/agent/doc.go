// Package agent is the host side of the threadbox agent protocol: a client
// that runs commands in a sandbox through the threadbox-agent process that
// is the sandbox's init. Both sandbox backends use it: infra/docker over a
// unix socket the agent dials (runc) or the container's attached stdin and
// (demultiplexed) stdout (gVisor), infra/local over the pipes of the
// bubblewrap child.
//
// The protocol (package protocol) is a stream of frames in both directions.
// A frame is a 9-byte header — type (1 byte), id (uint32 big endian),
// payload length (uint32 big endian) — and a payload: JSON for control
// frames, raw bytes for data. The host numbers its requests; one id names
// one command from its Exec frame to the agent's Exit (or Error) frame, so
// any number of commands run concurrently over one connection:
//
//	host  -> agent  Ping, Exec{args,dir,env,timeout,max_output,output_dir,open_stdin,tty,tag,window},
//	                Stdin(bytes), CloseStdin, Resize{rows,cols}, Signal{signal}, OutputAck{bytes}
//	agent -> host   Pong, Started{pid,window}, Stdout(bytes), Stderr(bytes),
//	                Exit{exit_code,signal,timed_out,*_truncated,oom_hint,output_files}, Error{message}
//
// Hold and Release (protocol/hold.go) quiet both directions at a frame
// boundary for a checkpoint of the sandbox: Client.Hold before it,
// Client.Resume after it (over the restored sandbox's connection; the
// client's commands and sessions go on), or Client.Release on a new client
// of a restored agent.
//
// Frame types 0x30-0x33 carry byte streams to loopback listeners inside the
// sandbox (Client.Listen; see protocol/stream.go): the host asks the agent to
// listen, and the agent carries each connection it accepts, so that programs
// in a sandbox without a network reach what the host serves. The agent
// writes nothing but frames to its stdout and sends no frame unasked (an
// accepted connection answers an earlier Listen), so the host may attach at
// any time before its first request.
//
// Start with StartOptions.Stream runs a long-lived command whose output is
// not capped and not kept: it goes only to Command.Output (terminal
// sessions, REPLs, file reads). Such a command keeps to flow control
// (protocol.Exec.Window): the agent sends at most protocol.OutputWindow
// bytes of its output that Command.Output has not yet taken, and the
// client gives the window back with OutputAck frames as it hands chunks
// over. A slow Output callback so holds back the command in the sandbox,
// as a slow terminal does, instead of making the host queue its output;
// a callback must therefore never wait for something only the command's
// later progress brings (it would wait for ever), and one whose reader
// went away drops what it is given.
//
// The agent caps each output stream at the command's MaxOutput and sends
// nothing beyond it, so the host holds at most two caps per command. Exec
// and Wait return the text the API shows: a truncated stream is the first
// cap bytes followed by "...[truncated]" (RenderOutput), and a command that
// timed out has exit code 124 and a stderr that ends with the line
// "Command timed out after Ns." (appended to what the command wrote before
// it was stopped, on a line of its own). Output passed to Command.Output is
// the raw capped bytes as they arrive, plus that timeout line.
//
// Every command runs in its own process group (its own session with a
// terminal). When the command's main process exits, or its timeout expires
// (SIGTERM, then SIGKILL after the agent's grace period), or its ctx is
// cancelled, the whole group is killed: background children never outlive
// the command.
//
// Wiring: for a pipe-based sandbox pass NewConn(stdout, stdin, close). For
// Docker, create the container with OpenStdin, AttachStdin/Stdout/Stderr and
// Tty false, attach (stream, stdin, stdout, stderr) before starting it, then
// run stdcopy.StdCopy(pipeWriter, stderrLog, hijacked.Reader) in a goroutine
// and close pipeWriter with StdCopy's error when it returns, so that a
// broken attach reaches the client as a read error; pass
// NewConn(pipeReader, hijacked.Conn, closeFn) where closeFn closes the
// hijacked connection and the pipe. The agent exits (killing its commands)
// when its stdin ends.
package agent

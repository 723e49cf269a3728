// Package protocol defines the framed, multiplexed wire format spoken between
// threadbox (the host) and threadbox-agent (the sandbox's init process) over
// the agent's stdin and stdout.
//
// Every frame is a 9-byte header followed by a payload:
//
//	offset 0: type    (1 byte, a Type)
//	offset 1: id      (uint32, big endian; the request or command id, 0 for none)
//	offset 5: length  (uint32, big endian; payload bytes, at most MaxPayload)
//
// Control payloads are JSON objects (the structs below); data payloads
// (Stdin, Stdout, Stderr, Ping, Pong) are raw bytes. The host picks the ids;
// an id names one command from its Exec frame until the agent's Exit or Error
// frame for it. Frame types the receiver does not know are ignored by the
// host and answered with an Error frame by the agent.
package protocol

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// HeaderSize is the size in bytes of a frame header.
const HeaderSize = 9

// MaxPayload is the largest payload a frame may carry. Readers reject larger
// frames as a protocol error.
const MaxPayload = 16 << 20

// MaxChunk is the largest data payload senders put in one Stdin, Stdout or
// Stderr frame.
const MaxChunk = 32 << 10

// DefaultMaxOutput is the per-stream output cap used when a request asks for
// none (1 MiB).
const DefaultMaxOutput = 1 << 20

// Type is the kind of a frame.
type Type byte

// Frame types sent by the host.
const (
	// TypePing asks for a Pong with the same id and payload.
	TypePing Type = 0x01
	// TypeExec starts a command; payload Exec.
	TypeExec Type = 0x10
	// TypeStdin carries raw bytes for the command's stdin (or terminal).
	TypeStdin Type = 0x11
	// TypeCloseStdin closes the command's stdin (sends EOT on a terminal).
	TypeCloseStdin Type = 0x12
	// TypeResize resizes the command's terminal; payload Resize.
	TypeResize Type = 0x13
	// TypeSignal sends a signal to the command's process group; payload Signal.
	TypeSignal Type = 0x14
	// TypeOutputAck gives back window to a command that keeps to flow
	// control (Exec.Window): payload Ack, the output bytes the host
	// consumed since its last OutputAck.
	TypeOutputAck Type = 0x18
)

// Frame types sent by the agent.
const (
	// TypePong answers a Ping with the same id and payload.
	TypePong Type = 0x02
	// TypeStarted reports that a command started; payload Started.
	TypeStarted Type = 0x20
	// TypeStdout carries raw bytes the command wrote to stdout (or its terminal).
	TypeStdout Type = 0x21
	// TypeStderr carries raw bytes the command wrote to stderr.
	TypeStderr Type = 0x22
	// TypeExit reports how a command ended; payload Exit. It is the last
	// frame for its id.
	TypeExit Type = 0x23
	// TypeError reports that a request failed; payload Error. For an Exec it
	// is the last frame for its id.
	TypeError Type = 0x24
)

// Frame types of byte streams to loopback listeners inside the sandbox
// (used to serve the product's API to the sandbox); see stream.go.
const (
	TypeStreamOpen   Type = 0x30
	TypeStreamOpened Type = 0x31
	TypeStreamData   Type = 0x32
	TypeStreamClose  Type = 0x33
	TypeStreamAck    Type = 0x34
)

// String names the frame type.
func (t Type) String() string {
	switch t {
	case TypePing:
		return "ping"
	case TypePong:
		return "pong"
	case TypeExec:
		return "exec"
	case TypeStdin:
		return "stdin"
	case TypeCloseStdin:
		return "close-stdin"
	case TypeResize:
		return "resize"
	case TypeSignal:
		return "signal"
	case TypeOutputAck:
		return "output-ack"
	case TypeStarted:
		return "started"
	case TypeStdout:
		return "stdout"
	case TypeStderr:
		return "stderr"
	case TypeExit:
		return "exit"
	case TypeError:
		return "error"
	case TypeHold:
		return "hold"
	case TypeRelease:
		return "release"
	case TypeHeld:
		return "held"
	case TypeReleased:
		return "released"
	case TypeHangup:
		return "hangup"
	case TypeHungUp:
		return "hung-up"
	case TypeStreamOpen, TypeStreamOpened, TypeStreamData, TypeStreamClose, TypeStreamAck:
		return fmt.Sprintf("stream(0x%02x)", byte(t))
	}
	return fmt.Sprintf("unknown(0x%02x)", byte(t))
}

// ErrFrameTooLarge reports a frame header announcing more than MaxPayload bytes.
var ErrFrameTooLarge = errors.New("protocol: frame too large")

// Frame is one decoded frame.
type Frame struct {
	Type    Type
	ID      uint32
	Payload []byte
}

// AppendFrame appends the encoding of one frame to dst and returns it.
func AppendFrame(dst []byte, t Type, id uint32, payload []byte) []byte {
	var h [HeaderSize]byte
	h[0] = byte(t)
	binary.BigEndian.PutUint32(h[1:5], id)
	binary.BigEndian.PutUint32(h[5:9], uint32(len(payload)))
	dst = append(dst, h[:]...)
	return append(dst, payload...)
}

// WriteFrame writes one frame with a single Write call, so that writers
// sharing w under a lock never interleave partial frames.
func WriteFrame(w io.Writer, t Type, id uint32, payload []byte) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("protocol: write %s: %w", t, ErrFrameTooLarge)
	}
	buf := AppendFrame(make([]byte, 0, HeaderSize+len(payload)), t, id, payload)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("protocol: write %s: %w", t, err)
	}
	return nil
}

// ReadFrame reads one frame from r. It returns io.EOF when r ends cleanly
// between frames and io.ErrUnexpectedEOF when it ends inside one.
func ReadFrame(r io.Reader) (Frame, error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	f := Frame{Type: Type(h[0]), ID: binary.BigEndian.Uint32(h[1:5])}
	n := binary.BigEndian.Uint32(h[5:9])
	if n > MaxPayload {
		return Frame{}, fmt.Errorf("protocol: read %s of %d bytes: %w", f.Type, n, ErrFrameTooLarge)
	}
	if n > 0 {
		f.Payload = make([]byte, n)
		if _, err := io.ReadFull(r, f.Payload); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, fmt.Errorf("protocol: read %s payload: %w", f.Type, err)
		}
	}
	return f, nil
}

// TTY is the size of a pseudo-terminal.
type TTY struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Exec is the payload of an Exec frame: one command to start.
type Exec struct {
	Args []string `json:"args"`
	// Dir is the working directory; empty means the agent's workspace, a
	// relative path is resolved against it.
	Dir string `json:"dir,omitempty"`
	// Env holds extra KEY=value pairs added to the agent's environment.
	Env []string `json:"env,omitempty"`
	// TimeoutMillis bounds the run time; zero means none. On timeout the
	// process group gets SIGTERM, then SIGKILL after the agent's grace.
	TimeoutMillis int64 `json:"timeout_ms,omitempty"`
	// MaxOutput caps each of stdout and stderr in bytes; zero means
	// DefaultMaxOutput. Bytes beyond the cap are read and dropped.
	MaxOutput int `json:"max_output,omitempty"`
	// OutputDir asks for a fresh $OUTPUT_DIR whose top-level regular files
	// are moved into the outputs folder when the command ends.
	OutputDir bool `json:"output_dir,omitempty"`
	// OpenStdin keeps stdin open for Stdin frames until CloseStdin; when
	// false stdin is /dev/null.
	OpenStdin bool `json:"open_stdin,omitempty"`
	// TTY, when set, runs the command on a pseudo-terminal of that size;
	// stdout and stderr are then both the terminal and arrive as Stdout.
	TTY *TTY `json:"tty,omitempty"`
	// Tag names a long-lived command, so that a host taking over the
	// restored sandbox later can find it (Released.Sessions) and attach to
	// it; empty for none.
	Tag string `json:"tag,omitempty"`
	// Window asks for flow control of the command's output: while Window
	// bytes or more of it that the host has not given back with OutputAck
	// are out, the agent reads no more of it, so a host that reads slowly
	// leaves the backlog in the sandbox's pipe or terminal, where the
	// command's writes block as they would on a slow terminal. (Its
	// stdout and stderr are read side by side, so up to twice Window may
	// be out.) Zero means none: MaxOutput bounds the output instead.
	Window int `json:"window,omitempty"`
}

// OutputWindow is the window of flow control the host asks for on a
// command whose output it streams without a cap (a terminal session, an
// interpreter, a file read).
const OutputWindow = 256 << 10

// Started is the payload of a Started frame.
type Started struct {
	// PID is the command's process id in the sandbox; it is also the id of
	// its process group.
	PID int `json:"pid"`
	// Window is the Exec's Window when the agent keeps to it; zero when it
	// does not (an agent from before flow control), and the host then
	// sends no OutputAck.
	Window int `json:"window,omitempty"`
}

// Exit is the payload of an Exit frame.
type Exit struct {
	// ExitCode is the process's exit status, or -1 when a signal ended it.
	ExitCode int `json:"exit_code"`
	// Signal is the signal number that ended the process, or 0.
	Signal int `json:"signal,omitempty"`
	// TimedOut reports that the timeout fired.
	TimedOut        bool `json:"timed_out,omitempty"`
	StdoutTruncated bool `json:"stdout_truncated,omitempty"`
	StderrTruncated bool `json:"stderr_truncated,omitempty"`
	// OOMHint reports that the process died of SIGKILL while the memory
	// cgroup's oom_kill counter rose: probably, not surely, out of memory.
	OOMHint bool `json:"oom_hint,omitempty"`
	// OutputFiles lists the sandbox paths moved into the outputs folder.
	OutputFiles []string `json:"output_files,omitempty"`
	// DurationMillis is the time from start to exit, measured by the agent.
	DurationMillis int64 `json:"duration_ms"`
	// CPUMillis is the command's CPU time (user plus system) in
	// milliseconds: the rusage of the command's process and of the
	// descendants it waited for. Agents before it was added omit it (zero).
	CPUMillis int64 `json:"cpu_ms,omitempty"`
	// Warning describes a non-fatal problem, such as an output file that
	// could not be moved.
	Warning string `json:"warning,omitempty"`
}

// Error is the payload of an Error frame.
type Error struct {
	Message string `json:"message"`
}

// Resize is the payload of a Resize frame.
type Resize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Signal is the payload of a Signal frame: the signal number sent to the
// command's whole process group.
type Signal struct {
	Signal int `json:"signal"`
}

// Encode marshals a control payload.
func Encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("protocol: encode: %w", err)
	}
	return b, nil
}

// Decode unmarshals a control payload into v.
func Decode(payload []byte, v any) error {
	if err := json.Unmarshal(payload, v); err != nil {
		return fmt.Errorf("protocol: decode: %w", err)
	}
	return nil
}

package protocol

// Byte streams to loopback listeners inside the sandbox (frame types
// 0x30-0x33). The host asks the agent to listen; the agent carries every
// connection it accepts over the frame stream, so that programs in a
// sandbox without a network can reach services the host chooses to serve.
//
//	host  -> agent  StreamOpen    id L  Listen{addr}          listen on addr (loopback only)
//	agent -> host   StreamOpened  id L  Opened{addr}          listening (or Error id L)
//	agent -> host   StreamOpened  id C  Opened{listener: L, addr: remote}
//	                                                          a connection C accepted on L
//	both            StreamData    id C  raw bytes
//	both            StreamClose   id C  (none)                the sender closed C
//	host  -> agent  StreamClose   id L  (none)                stop listening on L
//	host  -> agent  StreamAck     id C  Ack{bytes}            the host consumed bytes of C
//
// Flow control: an agent that says Window in a connection's Opened sends at
// most Window bytes of that connection that the host has not acknowledged
// with StreamAck; it stops reading the connection's socket until acks
// come, so a slow reader on the host leaves the backlog in the sandbox's
// own socket buffers. The host cuts a connection whose unread backlog goes
// past StreamWindow whatever the agent says (an older agent, or one that
// does not keep to it), so a sandbox cannot make the host buffer more.
//
// The ids of accepted connections are picked by the agent and have
// AgentIDBit set, so they never meet the host's request ids.

// StreamWindow is the window of flow control: the most bytes of one
// accepted connection the agent sends before the host acknowledges them.
const StreamWindow = 256 << 10

// AgentIDBit is set in the ids the agent picks for accepted connections.
const AgentIDBit uint32 = 1 << 31

// Listen is the payload of a host's StreamOpen frame.
type Listen struct {
	// Addr is the host:port to listen on; the host must be a loopback
	// address. Port 0 picks a free port.
	Addr string `json:"addr"`
}

// Opened is the payload of a StreamOpened frame: for a listener, the
// address it listens on; for an accepted connection, its listener's id and
// the peer's address.
type Opened struct {
	Listener uint32 `json:"listener,omitempty"`
	Addr     string `json:"addr"`
	// Window, on an accepted connection, says the agent keeps to flow
	// control with this window (StreamWindow); zero means it does not.
	Window int `json:"window,omitempty"`
}

// Ack is the payload of a StreamAck frame (how many more bytes of the
// connection the host has consumed) and of an OutputAck frame (how many
// more bytes of the command's output).
type Ack struct {
	Bytes int `json:"bytes"`
}

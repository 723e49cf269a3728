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
//
// The ids of accepted connections are picked by the agent and have
// AgentIDBit set, so they never meet the host's request ids.

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
}

package protocol

// Frames of a checkpoint. A sandbox's state is saved while both ends of
// the frame stream are between frames and quiet, so that the restored
// agent and the host that takes it over (the same client over new pipes,
// or a new one) meet at a frame boundary:
//
//	host  -> agent  Hold      id H  (none)      stop writing frames
//	agent -> host   Held      id H  (none)      the last frame until Release
//	host  -> agent  Release   id R  Release     write frames again
//	agent -> host   Released  id R  Released    the first frame after Hold
//
// The host sends nothing between Hold and Release, and answers Held by
// taking the checkpoint: the agent has then read every frame before Hold
// and waits for the next header, and has written Held last, its commands'
// output waiting for Release. A restored agent is held; the host's first
// frame is Release. An agent that does not know Hold answers it with an
// Error frame, and the host takes no checkpoint.
const (
	// TypeHold asks the agent to stop writing frames until Release.
	TypeHold Type = 0x15
	// TypeRelease lets a held agent write frames again.
	TypeRelease Type = 0x16
	// TypeHeld answers Hold: the agent writes nothing more until Release.
	TypeHeld Type = 0x25
	// TypeReleased answers Release; payload Released.
	TypeReleased Type = 0x26
)

// Release is the payload of a Release frame, which may be empty. A
// restored microVM's guest has a clock that stood still while it was
// saved and the random generator state of the moment it was saved: the
// host gives it its clock and a seed of its own, which the agent of a
// microVM guest applies before it writes again (other agents ignore
// them: their runtime keeps the clock).
type Release struct {
	// ClockUnixNano is the host's clock when the restored sandbox started
	// running, Unix nanoseconds; 0 for none.
	ClockUnixNano int64 `json:"clock_unix_nano,omitempty"`
	// Seed is random bytes for the guest's generator.
	Seed []byte `json:"seed,omitempty"`
}

// Released is the payload of a Released frame.
type Released struct {
	// NextID is above every id the host used so far: a new host taking
	// over a restored sandbox numbers its requests from it, so that none
	// names a command the agent still runs.
	NextID uint32 `json:"next_id"`
	// Sessions are the tagged commands still running (Exec.Tag), which a
	// new host may attach to: their frames are written after Released as
	// before the checkpoint, under their ids.
	Sessions []Running `json:"sessions,omitempty"`
}

// Running is one tagged command of a Released frame.
type Running struct {
	ID  uint32 `json:"id"`
	PID int    `json:"pid"`
	Tag string `json:"tag"`
	// Sent counts the output bytes (stdout and stderr) written for the
	// command before Released: what the host before had received.
	Sent int64 `json:"sent"`
	// Window is the command's window of flow control (Exec.Window), which
	// the agent starts afresh for the host that took the Release; zero
	// for none.
	Window int `json:"window,omitempty"`
}

// Frames of a relay. A host process may reach the agent through a relay
// that holds the agent's stdio and outlives the host (the gvisor
// backend's, cmd/threadbox-agent/relay.go): hosts come and go over its
// socket, one at a time, and the agent's pipes stay open. When a host's
// connection ends, the relay writes Hangup after the last whole frame of
// that host; the agent then does what a dialing agent does when its
// connection ends (the untagged commands are killed and their frames
// dropped, the tagged sessions wait) and answers HungUp, its last frame
// until the next host's Release. The relay drops the agent's frames up to
// that answer, so the next host's stream starts at a frame boundary with
// nothing of the host before:
//
//	relay -> agent  Hangup    id H  (none)   the host's connection ended
//	agent -> relay  HungUp    id H  (none)   nothing more until Release
const (
	// TypeHangup tells the agent its host's connection ended.
	TypeHangup Type = 0x17
	// TypeHungUp answers Hangup.
	TypeHungUp Type = 0x27
)

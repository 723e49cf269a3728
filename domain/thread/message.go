package thread

import (
	"context"
	"time"

	"threadbox/domain/fault"
)

// Role says who wrote a message.
type Role string

// The message roles.
const (
	User      Role = "user"
	Assistant Role = "assistant"
)

// Message is one stored turn of a thread. Content is the JSON array of
// content blocks as on the wire. An assistant message is complete only once
// its turn has ended; a crash mid-turn leaves it incomplete.
type Message struct {
	id        string
	threadID  string
	seq       int64
	role      Role
	content   []byte
	usage     []byte
	complete  bool
	createdAt time.Time
	ended     Ending
	replaced  bool
}

// EndReason says why an assistant message's turn ended before it finished.
type EndReason string

// Reasons a turn ended unfinished. An incomplete message without a reason
// was left by a server that stopped or died mid-turn.
const (
	// Stopped: the client stopped the turn or went away.
	Stopped EndReason = "stopped"
	// Failed: the turn ended in an error (the model upstream, the loop).
	Failed EndReason = "failed"
)

// Ending is why an unfinished turn ended: a reason and, for a failure,
// the error as its client was told it.
type Ending struct {
	Reason EndReason
	Detail string
}

// NewMessage returns a valid message.
func NewMessage(id, threadID string, role Role, content []byte, complete bool, now time.Time) (Message, error) {
	if id == "" || threadID == "" {
		return Message{}, fault.New(fault.Invalid, "message id and thread are required")
	}
	if role != User && role != Assistant {
		return Message{}, fault.New(fault.Invalid, "message role must be user or assistant")
	}
	if len(content) == 0 {
		return Message{}, fault.New(fault.Invalid, "message content is required")
	}
	return Message{id: id, threadID: threadID, role: role, content: content, complete: complete, createdAt: now.UTC()}, nil
}

// RestoreMessage rebuilds a message from storage.
func RestoreMessage(id, threadID string, seq int64, role Role, content, usage []byte, complete bool, createdAt time.Time, ended Ending) Message {
	return Message{id: id, threadID: threadID, seq: seq, role: role, content: content, usage: usage, complete: complete, createdAt: createdAt, ended: ended}
}

// ID returns the message id.
func (m Message) ID() string { return m.id }

// ThreadID returns the thread the message belongs to.
func (m Message) ThreadID() string { return m.threadID }

// Seq returns the message's position in its thread.
func (m Message) Seq() int64 { return m.seq }

// Role returns who wrote the message.
func (m Message) Role() Role { return m.role }

// Content returns the JSON array of content blocks.
func (m Message) Content() []byte { return m.content }

// Usage returns the JSON usage object, if any.
func (m Message) Usage() []byte { return m.usage }

// Complete reports whether the turn that wrote the message ended.
func (m Message) Complete() bool { return m.complete }

// CreatedAt returns when the message was stored.
func (m Message) CreatedAt() time.Time { return m.createdAt }

// Ended returns why the message's turn ended unfinished: the zero Ending
// for a complete message, or for one its server left (it stopped or died
// mid-turn).
func (m Message) Ended() Ending { return m.ended }

// Replaced reports whether a later turn replaced the message: an edited
// user message and its answer, or a regenerated answer. It stays in the
// thread, shown as an earlier version, and leaves the model's history.
func (m Message) Replaced() bool { return m.replaced }

// WithReplaced returns the message marked replaced (or not).
func (m Message) WithReplaced(on bool) Message {
	m.replaced = on
	return m
}

// Finish returns the message with its final content and usage, complete.
func (m Message) Finish(content, usage []byte) Message {
	m.content, m.usage, m.complete, m.ended = content, usage, true, Ending{}
	return m
}

// Progress returns the message with the content its running turn has
// produced so far, still incomplete.
func (m Message) Progress(content []byte) Message {
	m.content, m.complete = content, false
	return m
}

// Interrupt returns the message with what its turn produced, incomplete
// for good, and why its turn ended.
func (m Message) Interrupt(content []byte, why Ending) Message {
	m.content, m.complete, m.ended = content, false, why
	return m
}

// MessageRepository stores messages of threads.
type MessageRepository interface {
	AppendMessage(ctx context.Context, m Message) (Message, error)
	UpdateMessage(ctx context.Context, m Message) error
	Messages(ctx context.Context, threadID string) ([]Message, error)
	// ReplaceMessages marks messages of a thread replaced (Replaced).
	ReplaceMessages(ctx context.Context, threadID string, ids []string) error
}

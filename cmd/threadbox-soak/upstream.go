package main

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"threadbox/app/messages"
	"threadbox/infra/llm/fakeupstream"
	"threadbox/infra/llm/runner"
)

// upstream is the fake model server the soak points threadbox at: it
// answers as the offline runner does (running the fenced code blocks of
// the user's message) unless a fault is armed, then with that fault.
type upstream struct {
	srv *fakeupstream.Server

	mu     sync.Mutex
	armed  []fakeupstream.Reply
	served int
}

// newUpstream starts the fake upstream.
func newUpstream() *upstream {
	u := &upstream{srv: fakeupstream.New()}
	model := runner.New()
	u.srv.SetFallback(func(_ fakeupstream.Format, body json.RawMessage) fakeupstream.Reply {
		u.mu.Lock()
		u.served++
		if len(u.armed) > 0 {
			r := u.armed[0]
			u.armed = u.armed[1:]
			u.mu.Unlock()
			return r
		}
		u.mu.Unlock()
		var req struct {
			Messages []messages.Message
			Tools    []messages.ToolDefinition
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return fakeupstream.Reply{Status: http.StatusBadRequest, ErrorMessage: "soak upstream: " + err.Error()}
		}
		res, err := model.Step(context.Background(), messages.StepRequest{Messages: req.Messages, Tools: req.Tools})
		if err != nil {
			return fakeupstream.Reply{Status: http.StatusInternalServerError, ErrorMessage: err.Error()}
		}
		return fakeupstream.Reply{Content: res.Content, StopReason: res.StopReason}
	})
	return u
}

// arm makes the next n answers fail as kind says: "429", "529", "500",
// "hang" (no answer for 20 s), "cut" (the stream is dropped after two
// events) or "fail" (an error event after two events).
func (u *upstream) arm(kind string, n int) {
	var r fakeupstream.Reply
	text := []messages.ContentBlock{{Type: messages.BlockText, Text: "a reply that will not arrive whole"}}
	switch kind {
	case "429":
		r = fakeupstream.Reply{Status: 429, Header: fakeupstream.RetryAfter(time.Second)}
	case "529":
		r = fakeupstream.Reply{Status: 529, ErrorType: "overloaded_error", ErrorMessage: "Overloaded"}
	case "500":
		r = fakeupstream.Reply{Status: 500}
	case "hang":
		r = fakeupstream.Reply{Delay: 20 * time.Second, Content: text}
	case "cut":
		r = fakeupstream.Reply{CutAfter: 2, Content: text}
	default:
		r = fakeupstream.Reply{FailAfter: 2, Content: text}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for i := 0; i < n; i++ {
		u.armed = append(u.armed, r)
	}
}

// refused returns what the strict fake refused (requests a real provider
// would refuse).
func (u *upstream) refused() []string { return u.srv.Refused() }

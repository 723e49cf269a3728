package main

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/infra/llm/fakeupstream"
	"threadbox/infra/llm/runner"
)

// upstream is the fake model server the soak points threadbox at: it
// answers as the offline runner does (running the fenced code blocks of
// the user's message), altered by the next armed fault if any.
type upstream struct {
	srv *fakeupstream.Server

	mu    sync.Mutex
	armed []string
}

// newUpstream starts the fake upstream.
func newUpstream() *upstream {
	u := &upstream{srv: fakeupstream.New()}
	model := runner.New()
	u.srv.SetFallback(func(_ fakeupstream.Format, body json.RawMessage) fakeupstream.Reply {
		var req struct {
			Messages []wire.Message
			Tools    []messages.ToolDefinition
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return fakeupstream.Reply{Status: http.StatusBadRequest, ErrorMessage: "soak upstream: " + err.Error()}
		}
		res, err := model.Step(context.Background(), messages.StepRequest{Messages: req.Messages, Tools: req.Tools})
		if err != nil {
			return fakeupstream.Reply{Status: http.StatusInternalServerError, ErrorMessage: err.Error()}
		}
		r := fakeupstream.Reply{Content: res.Content, StopReason: res.StopReason}
		u.mu.Lock()
		defer u.mu.Unlock()
		if len(u.armed) == 0 {
			return r
		}
		kind := u.armed[0]
		u.armed = u.armed[1:]
		switch kind {
		case "429":
			return fakeupstream.Reply{Status: 429, Header: fakeupstream.RetryAfter(time.Second)}
		case "529":
			return fakeupstream.Reply{Status: 529, ErrorType: "overloaded_error", ErrorMessage: "Overloaded"}
		case "500":
			return fakeupstream.Reply{Status: 500}
		case "hang":
			r.Delay = 20 * time.Second
		case "cut":
			r.CutAfter = 2 // streamed answers only
		default:
			r.FailAfter = 2 // streamed answers only
		}
		return r
	})
	return u
}

// arm makes the next n answers fail as kind says: "429", "529", "500",
// "hang" (the answer comes after 20 s), "cut" (a streamed answer is
// dropped after two events) or "fail" (an error event after two events).
func (u *upstream) arm(kind string, n int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i := 0; i < n; i++ {
		u.armed = append(u.armed, kind)
	}
}

// refused returns what the strict fake refused (requests a real provider
// would refuse).
func (u *upstream) refused() []string { return u.srv.Refused() }

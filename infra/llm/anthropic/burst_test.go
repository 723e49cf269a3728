package anthropic

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"threadbox/app/messages"
)

// TestStreamStepMarksBursts checks the More hint: events that came in one
// read of the upstream are emitted with More set but for the last, and
// that last one is emitted before the adapter reads on. The upstream
// writes its first burst and then waits until the burst's last event was
// emitted: an adapter that held it while reading would never get the rest.
func TestStreamStepMarksBursts(t *testing.T) {
	sse := func(name, data string) string { return fmt.Sprintf("event: %s\ndata: %s\n\n", name, data) }
	first := sse("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":3}}}`) +
		sse("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) +
		sse("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}`)
	second := sse("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}`) +
		sse("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		sse("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}`) +
		sse("message_stop", `{"type":"message_stop"}`)
	emitted := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(first))
		w.(http.Flusher).Flush()
		select {
		case <-emitted:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte(second))
	}))
	defer srv.Close()
	m := New(Config{BaseURL: srv.URL, APIKey: "k", Model: "m", MaxRetries: -1})
	var got []messages.StepEvent
	burst := true
	res, err := m.StreamStep(context.Background(), stepRequest(), func(ev messages.StepEvent) error {
		got = append(got, ev)
		if burst && !ev.More {
			burst = false
			close(emitted) // the first burst's last event, before the rest was sent
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 1 || res.Content[0].Text != "Hello" {
		t.Fatalf("result %+v", res)
	}
	want := []struct {
		kind messages.StepEventKind
		more bool
	}{{messages.StepStart, true}, {messages.StepBlockStart, true}, {messages.StepBlockDelta, false}, {messages.StepBlockDelta, true}, {messages.StepBlockStop, false}}
	if len(got) != len(want) {
		t.Fatalf("events %+v", got)
	}
	for i, w := range want {
		if got[i].Kind != w.kind || got[i].More != w.more {
			t.Fatalf("event %d: kind %d more %v, want kind %d more %v", i, got[i].Kind, got[i].More, w.kind, w.more)
		}
	}
}

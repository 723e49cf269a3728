package fakeupstream

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"threadbox/app/messages"
)

// TestDelay: a reply's Delay holds the answer back, and a caller that
// gives up is not kept waiting.
func TestDelay(t *testing.T) {
	text := []messages.ContentBlock{{Type: messages.BlockText, Text: "ok"}}
	s := New(Reply{Content: text, Delay: 80 * time.Millisecond}, Reply{Content: text, Delay: time.Hour})
	call := func(ctx context.Context) (time.Duration, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/v1/messages", strings.NewReader(`{"model":"m","messages":[]}`))
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return time.Since(start), err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && !strings.Contains(string(b), `"ok"`) {
			t.Fatalf("body %s", b)
		}
		return time.Since(start), err
	}
	if d, err := call(context.Background()); err != nil || d < 80*time.Millisecond {
		t.Fatalf("delayed reply after %s, %v", d, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := call(ctx); err == nil {
		t.Fatal("a call abandoned during an hour's delay succeeded")
	}
	// Close waits for running handlers: it returns only if the abandoned
	// one stopped waiting.
	s.Close()
}

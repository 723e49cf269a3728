package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	msgwire "threadbox/app/messages/wire"
	"threadbox/web"
)

// TestTurnEventsOpenWithMessageStart: a chat turn's events, followed from
// the start while the model takes longer than the ping interval to start
// its answer, open with message_start, as Anthropic's streams do: no
// keepalive ping comes before it.
func TestTurnEventsOpenWithMessageStart(t *testing.T) {
	s, fake := modelServer(t, "", "anthropic", nil)
	f := newWSFixture(t, s)
	gate := make(chan struct{})
	slow := textStep("Hello.")
	slow.Gate = gate
	fake.Push(slow)
	opened := false
	defer func() {
		if !opened {
			close(gate)
		}
	}()

	// The turn's own request, read to its end aside.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body, _ := json.Marshal(map[string]any{"content": "hi", "stream": true})
	posted := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", s.base+appAPI+"/thread/"+f.tid+"/messages", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+f.admin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		posted <- err
	}()
	var turnID string
	waitFor(t, 30*time.Second, func() bool {
		var listing struct {
			RunningTurnID string `json:"running_turn_id"`
		}
		_ = json.Unmarshal(s.do("GET", appAPI+"/thread/"+f.tid+"/messages", f.admin, nil).body, &listing)
		turnID = listing.RunningTurnID
		return turnID != ""
	}, func() string { return "the turn never showed as running" })

	// Its events from the start, pings included.
	req, _ := http.NewRequestWithContext(ctx, "GET", s.base+appAPI+"/thread/"+f.tid+"/turns/"+turnID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+f.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("events: %d", resp.StatusCode)
	}
	names := make(chan string, 64)
	go func() {
		defer close(names)
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if name, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "event: "); ok {
				names <- name
			}
		}
	}()
	// The model holds its answer back past the ping interval.
	time.Sleep(web.DefaultPingInterval * 3 / 2)
	opened = true
	close(gate)

	var got []string
	for name := range names {
		got = append(got, name)
		if name == msgwire.EventMessageStop {
			break
		}
	}
	if len(got) == 0 || got[0] != msgwire.EventMessageStart || got[len(got)-1] != msgwire.EventMessageStop {
		t.Fatalf("the turn's events: %v, want message_start first and message_stop last", got)
	}
	cancel()
	<-posted
}

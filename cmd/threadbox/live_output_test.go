package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	msgwire "threadbox/app/messages/wire"
)

// TestLiveOutputInTheMessagesAPI: with threadbox-beta: live-output a
// Messages API stream carries a running command's output as it is
// produced (threadbox_tool_output events, line by line here); without the
// header it carries none. The official Go and TypeScript SDKs accumulate
// the same final message either way.
func TestLiveOutputInTheMessagesAPI(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin})
	tok := s.bootstrap("acme", "admin@acme.test")
	const count = "for i in 1 2 3; do echo line$i; sleep 0.5; done"
	body, _ := json.Marshal(map[string]any{"model": "default", "max_tokens": 256, "stream": true, "container": "live",
		"tools":    []any{map[string]any{"type": "code_execution_20250825", "name": "code_execution"}},
		"messages": []any{map[string]any{"role": "user", "content": "count"}}})

	for _, live := range []bool{true, false} {
		fake.Push(bashStep(count), textStep("counted"))
		var hdr []string
		if live {
			hdr = []string{"threadbox-beta", "live-output"}
		}
		_, evs, _ := openSSE(t, "POST", s.base+"/api/gpt/v1/messages", tok, body, hdr...)
		var outputs []msgwire.ToolOutput
		var names []string
		for {
			ev, ok := nextEvent(t, evs, 30*time.Second)
			if !ok {
				break
			}
			names = append(names, ev.name)
			if ev.name == msgwire.EventToolOutput {
				var o msgwire.ToolOutput
				if err := json.Unmarshal([]byte(ev.data), &o); err != nil {
					t.Fatal(err)
				}
				outputs = append(outputs, o)
			}
		}
		if names[len(names)-1] != "message_stop" {
			t.Fatalf("live %v: the stream ended with %v", live, names)
		}
		if !live {
			if len(outputs) != 0 {
				t.Fatalf("output events without the header: %+v", outputs)
			}
			continue
		}
		var text strings.Builder
		for i, o := range outputs {
			text.WriteString(o.Text)
			if o.Stream != "stdout" || !strings.HasPrefix(o.ToolUseID, "srvtoolu_") || (i > 0 && o.ElapsedMs < outputs[i-1].ElapsedMs) {
				t.Fatalf("output event %d: %+v", i, o)
			}
		}
		if text.String() != "line1\nline2\nline3\n" || len(outputs) < 3 || outputs[len(outputs)-1].ElapsedMs-outputs[0].ElapsedMs < 700 {
			t.Fatalf("live output: %+v", outputs)
		}
	}

	// The SDK's accumulated message is the same with and without.
	final := func(opts ...option.RequestOption) anthropic.Message {
		fake.Push(bashStep(count), textStep("counted"))
		cl := msgClient(s, tok, opts...)
		st := cl.Messages.NewStreaming(context.Background(), msgParams("live", userText("count"), codeExecTool...))
		var m anthropic.Message
		for st.Next() {
			if err := m.Accumulate(st.Current()); err != nil {
				t.Fatalf("accumulate: %v", err)
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	shape := func(m anthropic.Message) string {
		var parts []string
		for _, b := range m.Content {
			p := b.Type
			switch b.Type {
			case "text":
				p += ":" + b.Text
			case "bash_code_execution_tool_result":
				var r struct {
					Content struct {
						Stdout     string `json:"stdout"`
						ReturnCode int    `json:"return_code"`
					} `json:"content"`
				}
				_ = json.Unmarshal([]byte(b.RawJSON()), &r)
				p += ":" + r.Content.Stdout
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "|") + " " + string(m.StopReason)
	}
	with, without := shape(final(option.WithHeader("threadbox-beta", "live-output"))), shape(final())
	if with != without || !strings.Contains(with, "line1\nline2\nline3\n") || !strings.HasSuffix(with, "end_turn") {
		t.Fatalf("accumulated with live output %q, without %q", with, without)
	}

	// So does the official TypeScript SDK.
	sdk := tsSDK(t)
	ts := func(live bool) string {
		fake.Push(bashStep(count), textStep("counted"))
		args := []string{filepath.Join(sdk, "stream.mjs")}
		if live {
			args = append(args, "live")
		}
		cmd := exec.Command("node", args...)
		cmd.Env = append(os.Environ(), "BASE_URL="+s.base+"/api/gpt", "TOKEN="+tok, "CONTAINER=live")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the TypeScript SDK (live %v): %v %s", live, err, out)
		}
		var got struct {
			Message struct {
				Content []struct {
					Type    string `json:"type"`
					Text    string `json:"text"`
					Content struct {
						Stdout string `json:"stdout"`
					} `json:"content"`
				} `json:"content"`
				StopReason string `json:"stop_reason"`
			} `json:"message"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("the TypeScript SDK's output: %v %s", err, out)
		}
		var parts []string
		for _, b := range got.Message.Content {
			p := b.Type
			switch b.Type {
			case "text":
				p += ":" + b.Text
			case "bash_code_execution_tool_result":
				p += ":" + b.Content.Stdout
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "|") + " " + got.Message.StopReason
	}
	if tsWith, tsWithout := ts(true), ts(false); tsWith != tsWithout || tsWith != with {
		t.Fatalf("the TypeScript SDK accumulated %q with live output, %q without (the Go SDK: %q)", tsWith, tsWithout, with)
	}
	if refused := fake.Refused(); len(refused) != 0 {
		t.Fatalf("refused upstream: %v", refused)
	}
}

// tsSDK returns the folder of the official TypeScript SDK's client script
// (testdata/tssdk, its packages installed by scripts/test.sh); missing node
// or packages fail under CI.
func tsSDK(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "tssdk"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing(t, "node is missing: the TypeScript SDK cannot run")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@anthropic-ai", "sdk")); err != nil {
		missing(t, "the TypeScript SDK is not installed (npm ci --prefix cmd/threadbox/testdata/tssdk): %v", err)
	}
	return dir
}

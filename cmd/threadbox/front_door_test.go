package main

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	msgwire "threadbox/app/messages/wire"
	"threadbox/infra/llm/fakeupstream"
)

// upstreamTools returns the tools of an upstream request, decoded for
// comparison, and their names (either wire format).
func upstreamTools(t *testing.T, req fakeupstream.Request) ([]any, []string) {
	t.Helper()
	var body struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil {
		t.Fatal(err)
	}
	var tools []any
	var names []string
	for _, raw := range body.Tools {
		var v any
		var named struct {
			Name     string `json:"name"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &v) != nil || json.Unmarshal(raw, &named) != nil {
			t.Fatalf("tool %s", raw)
		}
		tools = append(tools, v)
		names = append(names, named.Name+named.Function.Name)
	}
	return tools, names
}

// TestChatAndMessagesAPIReachTheModelAlike: a chat turn of a thread and a
// Messages API request naming the thread's container, both asking for code
// execution, reach the model with the same tool definitions, and their
// calls run in the same container: what the chat wrote the API's call
// reads, and what the API's call wrote the thread serves; streamed and
// not (the upstream streams when the client does), both wire formats,
// SQLite and PostgreSQL, the strict fake upstream.
func TestChatAndMessagesAPIReachTheModelAlike(t *testing.T) {
	for _, provider := range []string{"anthropic", "openai"} {
		t.Run(provider, func(t *testing.T) {
			databases(t, func(t *testing.T, dbURL string) {
				s, fake := modelServer(t, dbURL, provider, nil)
				f := newWSFixture(t, s)
				editor := func(input map[string]any) fakeupstream.Reply {
					return steps(call(msgwire.SubToolTextEditor, input))
				}

				for _, stream := range []bool{false, true} {
					chatFile, apiFile := fmt.Sprintf("chat-%v.txt", stream), fmt.Sprintf("api-%v.txt", stream)

					// The chat turn writes a file in the thread's container.
					fake.Push(editor(map[string]any{"command": "create", "path": "/mnt/user-data/outputs/" + chatFile, "file_text": "written by the chat"}), textStep("saved"))
					before := len(fake.Requests())
					r := s.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, map[string]any{
						"content": "save it", "stream": stream, "pgpt": map[string]any{"tools": []any{"code_execution"}}})
					if r.status != 200 || !strings.Contains(string(r.body), "saved") {
						t.Fatalf("stream %v: chat turn: %d %s (refused: %v)", stream, r.status, r.body, fake.Refused())
					}
					chat := fake.Requests()[before]

					// The same request through the Messages API, the
					// thread's container named, reads that file and writes
					// another.
					fake.Push(editor(map[string]any{"command": "view", "path": "/mnt/user-data/outputs/" + chatFile}),
						editor(map[string]any{"command": "create", "path": "/mnt/user-data/outputs/" + apiFile, "file_text": "written by the API"}),
						textStep("read and saved"))
					before = len(fake.Requests())
					msg := apiMessage(t, msgClient(s, f.admin), msgParams(f.tid, userText("save it"), codeExecTool...), stream)
					reqs := fake.Requests()
					if len(reqs)-before != 3 {
						t.Fatalf("stream %v: %d upstream requests for the API call, want 3 (refused: %v)", stream, len(reqs)-before, fake.Refused())
					}
					api := reqs[before]
					if msg.Container.ID != f.tid {
						t.Fatalf("stream %v: the API call ran in container %q, want the thread's %q", stream, msg.Container.ID, f.tid)
					}
					view := editorResult(t, msg.Content, 0)
					if view.Type != "text_editor_code_execution_view_result" || !strings.Contains(view.RawJSON(), "written by the chat") {
						t.Fatalf("stream %v: the API call read %s, want the chat's file", stream, view.RawJSON())
					}
					if got := string(reqs[before+1].Body); !strings.Contains(got, "written by the chat") {
						t.Fatalf("stream %v: the model was not given the chat's file: %s", stream, got)
					}
					if dl := s.do("GET", appAPI+"/thread/"+f.tid+"/download-file?path=/mnt/user-data/outputs/"+apiFile, f.admin, nil); dl.status != 200 || string(dl.body) != "written by the API" {
						t.Fatalf("stream %v: the thread serves %s as %d %q, want the API call's file", stream, apiFile, dl.status, dl.body)
					}

					chatTools, chatNames := upstreamTools(t, chat)
					apiTools, apiNames := upstreamTools(t, api)
					if !reflect.DeepEqual(chatTools, apiTools) {
						t.Fatalf("stream %v: tool definitions differ:\nchat %v: %s\nAPI  %v: %s", stream, chatNames, chat.Body, apiNames, api.Body)
					}
					for _, want := range []string{msgwire.SubToolBash, msgwire.SubToolTextEditor} {
						if !strings.Contains(strings.Join(apiNames, ","), want) {
							t.Errorf("stream %v: the model is not offered %s: %v", stream, want, apiNames)
						}
					}
					if chat.Stream != stream || api.Stream != stream {
						t.Errorf("stream %v: the upstream was asked to stream %v by the chat, %v by the API", stream, chat.Stream, api.Stream)
					}
				}
				if refused := fake.Refused(); len(refused) != 0 {
					t.Fatalf("the upstream refused requests a real provider would refuse: %v", refused)
				}
			})
		})
	}
}

// apiMessage sends params with the official SDK, streamed (and
// accumulated) or not, and returns the message.
func apiMessage(t *testing.T, cl anthropic.Client, params anthropic.MessageNewParams, stream bool) *anthropic.Message {
	t.Helper()
	if !stream {
		msg, err := cl.Messages.New(context.Background(), params)
		if err != nil {
			t.Fatalf("Messages API: %v", err)
		}
		return msg
	}
	var msg anthropic.Message
	events := cl.Messages.NewStreaming(context.Background(), params)
	defer events.Close()
	for events.Next() {
		if err := msg.Accumulate(events.Current()); err != nil {
			t.Fatalf("Messages API stream: %v", err)
		}
	}
	if err := events.Err(); err != nil {
		t.Fatalf("Messages API stream: %v", err)
	}
	return &msg
}

package main

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"threadbox/app/messages"
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
// reads, and what the API's call wrote the thread serves (both wire
// formats, SQLite and PostgreSQL, the strict fake upstream).
func TestChatAndMessagesAPIReachTheModelAlike(t *testing.T) {
	for _, provider := range []string{"anthropic", "openai"} {
		t.Run(provider, func(t *testing.T) {
			databases(t, func(t *testing.T, dbURL string) {
				s, fake := modelServer(t, dbURL, provider, nil)
				f := newWSFixture(t, s)
				editor := func(input map[string]any) fakeupstream.Reply {
					return steps(call(messages.SubToolTextEditor, input))
				}

				// The chat turn writes a file in the thread's container.
				fake.Push(editor(map[string]any{"command": "create", "path": "/mnt/user-data/outputs/chat.txt", "file_text": "written by the chat"}), textStep("saved"))
				before := len(fake.Requests())
				r := s.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, map[string]any{
					"content": "save it", "pgpt": map[string]any{"tools": []any{"code_execution"}}})
				if r.status != 200 || !strings.Contains(string(r.body), "saved") {
					t.Fatalf("chat turn: %d %s (refused: %v)", r.status, r.body, fake.Refused())
				}
				chat := fake.Requests()[before]

				// The same request through the Messages API, the thread's
				// container named, reads that file and writes another.
				fake.Push(editor(map[string]any{"command": "view", "path": "/mnt/user-data/outputs/chat.txt"}),
					editor(map[string]any{"command": "create", "path": "/mnt/user-data/outputs/api.txt", "file_text": "written by the API"}),
					textStep("read and saved"))
				before = len(fake.Requests())
				cl := msgClient(s, f.admin)
				msg, err := cl.Messages.New(context.Background(), msgParams(f.tid, userText("save it"), codeExecTool...))
				if err != nil {
					t.Fatalf("Messages API: %v (refused: %v)", err, fake.Refused())
				}
				reqs := fake.Requests()
				if len(reqs)-before != 3 {
					t.Fatalf("%d upstream requests for the API call, want 3", len(reqs)-before)
				}
				api := reqs[before]
				if msg.Container.ID != f.tid {
					t.Fatalf("the API call ran in container %q, want the thread's %q", msg.Container.ID, f.tid)
				}
				view := editorResult(t, msg.Content, 0)
				if view.Type != "text_editor_code_execution_view_result" || !strings.Contains(view.RawJSON(), "written by the chat") {
					t.Fatalf("the API call read %s, want the chat's file", view.RawJSON())
				}
				if got := string(reqs[before+1].Body); !strings.Contains(got, "written by the chat") {
					t.Fatalf("the model was not given the chat's file: %s", got)
				}
				if dl := s.do("GET", appAPI+"/thread/"+f.tid+"/download-file?path=/mnt/user-data/outputs/api.txt", f.admin, nil); dl.status != 200 || string(dl.body) != "written by the API" {
					t.Fatalf("the thread serves api.txt as %d %q, want the API call's file", dl.status, dl.body)
				}

				chatTools, chatNames := upstreamTools(t, chat)
				apiTools, apiNames := upstreamTools(t, api)
				if !reflect.DeepEqual(chatTools, apiTools) {
					t.Fatalf("tool definitions differ:\nchat %v: %s\nAPI  %v: %s", chatNames, chat.Body, apiNames, api.Body)
				}
				for _, want := range []string{messages.SubToolBash, messages.SubToolTextEditor} {
					if !strings.Contains(strings.Join(apiNames, ","), want) {
						t.Errorf("the model is not offered %s: %v", want, apiNames)
					}
				}
				if refused := fake.Refused(); len(refused) != 0 {
					t.Fatalf("the upstream refused requests a real provider would refuse: %v", refused)
				}
			})
		})
	}
}

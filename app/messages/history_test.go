package messages

import (
	"encoding/json"
	"strings"
	"testing"

	"threadbox/app/messages/wire"
)

// shape renders messages compactly: role:[types] with ids.
func shape(msgs []wire.Message) string {
	var parts []string
	for _, m := range msgs {
		var bs []string
		for _, b := range m.Content {
			s := b.Type
			if b.ID != "" {
				s += "(" + b.ID + ")"
			}
			if b.ToolUseID != "" {
				s += "(" + b.ToolUseID + ")"
			}
			bs = append(bs, s)
		}
		parts = append(parts, m.Role+":["+strings.Join(bs, ",")+"]")
	}
	return strings.Join(parts, " ")
}

func TestUpstreamHistory(t *testing.T) {
	res := func(id string) wire.ContentBlock {
		return wire.ContentBlock{Type: wire.BlockBashResult, ToolUseID: id, Result: &wire.ToolResult{Type: wire.ResultBash, Stdout: "x"}}
	}
	srv := func(id string) wire.ContentBlock {
		return wire.ContentBlock{Type: wire.BlockServerToolUse, ID: id, Name: wire.SubToolBash, Input: json.RawMessage(`{}`)}
	}
	tests := []struct {
		name string
		in   []wire.Message
		want string
	}{
		{
			name: "rounds of an assistant turn split into pairs",
			in: []wire.Message{user("go"), {Role: wire.RoleAssistant, Content: []wire.ContentBlock{
				text("a"), srv("s1"), res("s1"), text("b"), srv("s2"), res("s2"), text("done")}}},
			want: "user:[text] assistant:[text,tool_use(s1)] user:[tool_result(s1)] assistant:[text,tool_use(s2)] user:[tool_result(s2)] assistant:[text]",
		},
		{
			name: "paused turn ends in a tool result",
			in:   []wire.Message{user("go"), {Role: wire.RoleAssistant, Content: []wire.ContentBlock{srv("s1"), res("s1")}}},
			want: "user:[text] assistant:[tool_use(s1)] user:[tool_result(s1)]",
		},
		{
			name: "server results merge before the client's tool results",
			in: []wire.Message{user("go"),
				{Role: wire.RoleAssistant, Content: []wire.ContentBlock{srv("s1"), toolUse("c1", "f", `{}`), res("s1")}},
				{Role: wire.RoleUser, Content: []wire.ContentBlock{{Type: wire.BlockToolResult, ToolUseID: "c1"}, text("more")}}},
			want: "user:[text] assistant:[tool_use(s1),tool_use(c1)] user:[tool_result(s1),tool_result(c1),text]",
		},
		{
			name: "two user messages of the client stay two prompts",
			in:   []wire.Message{user("first, interrupted"), user("second")},
			want: "user:[text] user:[text]",
		},
		{
			name: "a paused turn's results lead the next user message",
			in:   []wire.Message{user("go"), {Role: wire.RoleAssistant, Content: []wire.ContentBlock{srv("s1"), res("s1")}}, user("more")},
			want: "user:[text] assistant:[tool_use(s1)] user:[tool_result(s1),text]",
		},
		{
			name: "empty text is dropped, each call and its result form a pair",
			in:   []wire.Message{user("go"), {Role: wire.RoleAssistant, Content: []wire.ContentBlock{text(""), srv("s1"), res("s1"), srv("s2"), res("s2")}}},
			want: "user:[text] assistant:[tool_use(s1)] user:[tool_result(s1)] assistant:[tool_use(s2)] user:[tool_result(s2)]",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := shape(upstreamHistory(tc.in)); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestReadableHistory(t *testing.T) {
	hist := []wire.Message{
		user("run it"),
		{Role: wire.RoleAssistant, Content: []wire.ContentBlock{text("running"), toolUse("s1", wire.SubToolBash, `{ "command": "ls" }`), toolUse("c1", "lookup", `{}`)}},
		{Role: wire.RoleUser, Content: []wire.ContentBlock{
			{Type: wire.BlockToolResult, ToolUseID: "s1", Content: json.RawMessage(`"{\"stdout\":\"a.txt\"}"`)},
			{Type: wire.BlockToolResult, ToolUseID: "c1", Content: json.RawMessage(`[{"type":"text","text":"found"}]`), IsError: true},
		}},
		{Role: wire.RoleAssistant, Content: []wire.ContentBlock{text("done")}},
		user("next"),
	}
	t.Run("tools no longer offered become text", func(t *testing.T) {
		got := readableHistory(hist, nil)
		if s := shape(got); s != "user:[text] assistant:[text,text,text] user:[text,text] assistant:[text] user:[text]" {
			t.Fatalf("shape %s", s)
		}
		if got[1].Content[1].Text != `[Called the tool bash_code_execution (no longer offered) with input {"command":"ls"}]` ||
			got[2].Content[0].Text != `[Result of bash_code_execution: {"stdout":"a.txt"}]` ||
			got[2].Content[1].Text != `[Result of lookup: error: found]` {
			t.Fatalf("text: %q %q %q", got[1].Content[1].Text, got[2].Content[0].Text, got[2].Content[1].Text)
		}
		if hist[1].Content[1].Type != wire.BlockToolUse {
			t.Fatal("the input history was changed")
		}
	})
	t.Run("offered tools stay calls", func(t *testing.T) {
		got := readableHistory(hist, []ToolDefinition{{Name: "lookup"}})
		if s := shape(got); s != "user:[text] assistant:[text,text,tool_use(c1)] user:[text,tool_result(c1)] assistant:[text] user:[text]" {
			t.Fatalf("shape %s", s)
		}
	})
	t.Run("all offered: unchanged", func(t *testing.T) {
		got := readableHistory(hist, []ToolDefinition{{Name: "lookup"}, {Name: wire.SubToolBash}})
		if shape(got) != shape(hist) {
			t.Fatalf("shape %s", shape(got))
		}
	})
}

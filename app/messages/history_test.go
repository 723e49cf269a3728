package messages

import (
	"encoding/json"
	"strings"
	"testing"
)

// shape renders messages compactly: role:[types] with ids.
func shape(msgs []Message) string {
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
	res := func(id string) ContentBlock {
		return ContentBlock{Type: BlockBashResult, ToolUseID: id, Result: &ToolResult{Type: ResultBash, Stdout: "x"}}
	}
	srv := func(id string) ContentBlock {
		return ContentBlock{Type: BlockServerToolUse, ID: id, Name: SubToolBash, Input: json.RawMessage(`{}`)}
	}
	tests := []struct {
		name string
		in   []Message
		want string
	}{
		{
			name: "rounds of an assistant turn split into pairs",
			in: []Message{user("go"), {Role: RoleAssistant, Content: []ContentBlock{
				text("a"), srv("s1"), res("s1"), text("b"), srv("s2"), res("s2"), text("done")}}},
			want: "user:[text] assistant:[text,tool_use(s1)] user:[tool_result(s1)] assistant:[text,tool_use(s2)] user:[tool_result(s2)] assistant:[text]",
		},
		{
			name: "paused turn ends in a tool result",
			in:   []Message{user("go"), {Role: RoleAssistant, Content: []ContentBlock{srv("s1"), res("s1")}}},
			want: "user:[text] assistant:[tool_use(s1)] user:[tool_result(s1)]",
		},
		{
			name: "server results merge before the client's tool results",
			in: []Message{user("go"),
				{Role: RoleAssistant, Content: []ContentBlock{srv("s1"), toolUse("c1", "f", `{}`), res("s1")}},
				{Role: RoleUser, Content: []ContentBlock{{Type: BlockToolResult, ToolUseID: "c1"}, text("more")}}},
			want: "user:[text] assistant:[tool_use(s1),tool_use(c1)] user:[tool_result(s1),tool_result(c1),text]",
		},
		{
			name: "empty text is dropped, each call and its result form a pair",
			in:   []Message{user("go"), {Role: RoleAssistant, Content: []ContentBlock{text(""), srv("s1"), res("s1"), srv("s2"), res("s2")}}},
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

package wire

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

// TestEncodersMatchMarshal: the hand-written encoders write exactly what
// json.Marshal writes for the same values: strings of every kind of
// character (escapes, HTML, U+2028, invalid UTF-8), text blocks, and whole
// responses with blocks of other types, usage and container.
func TestEncodersMatchMarshal(t *testing.T) {
	strs := []string{"", "plain", `quote " and \ back`, "\b\f\n\r\t\x00\x01\x1f\x7f", "<a href='x'>&amp;</a>",
		"line\u2028para\u2029", "bad \xff\xfe utf8 \xc3", "héllo wörld ✓ 😀", "\xed\xa0\x80 surrogate"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		strs = append(strs, string(b))
	}
	for _, s := range strs {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Fatalf("appendString(%q) = %s, json.Marshal %s", s, got, want)
		}
		blk := ContentBlock{Type: BlockText, Text: s}
		got, err := json.Marshal(blk)
		if err != nil {
			t.Fatal(err)
		}
		wantBlk, _ := json.Marshal(struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}{BlockText, s})
		if string(got) != string(wantBlk) {
			t.Fatalf("text block %q: %s, want %s", s, got, wantBlk)
		}
	}

	seq := "<stop>"
	responses := []Response{
		{},
		{ID: "msg_1", Type: "message", Role: RoleAssistant, Model: "m<&>", Content: []ContentBlock{{Type: BlockText, Text: "hi\n"}},
			StopReason: StopEndTurn, Usage: Usage{InputTokens: 12, OutputTokens: 3}},
		{ID: "msg_2", Type: "message", Role: RoleAssistant, Model: "m", StopSequence: &seq, StopReason: StopSequence,
			Content: []ContentBlock{
				{Type: BlockText, Text: "cited", Citations: json.RawMessage(` [ {"type" : "x"} ] `)},
				{Type: BlockToolUse, ID: "toolu_1", Name: "f", Input: json.RawMessage(`{ "a" : "<b>" }`)},
				{Type: BlockThinking, Thinking: "hm", Signature: "sig"},
				{Type: "mystery", Raw: json.RawMessage(`{ "type": "mystery", "x": "<y>" }`)},
				{Type: BlockBashResult, ToolUseID: "srvtoolu_1", Result: &ToolResult{Type: ResultBash, Stdout: "out", ReturnCode: 1}},
			},
			Usage:     Usage{InputTokens: 1, ServerToolUse: &ServerToolUse{CodeExecutionRequests: 2}},
			Container: &Container{ID: "container_1", ExpiresAt: time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)}},
	}
	for _, r := range responses {
		var stop *string
		if r.StopReason != "" {
			stop = &r.StopReason
		}
		content := r.Content
		if content == nil {
			content = []ContentBlock{}
		}
		want, err := json.Marshal(struct {
			ID           string         `json:"id"`
			Type         string         `json:"type"`
			Role         string         `json:"role"`
			Model        string         `json:"model"`
			Content      []ContentBlock `json:"content"`
			StopReason   *string        `json:"stop_reason"`
			StopSequence *string        `json:"stop_sequence"`
			Usage        Usage          `json:"usage"`
			Container    *Container     `json:"container,omitempty"`
		}{r.ID, r.Type, r.Role, r.Model, content, stop, r.StopSequence, r.Usage, r.Container})
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("response:\n got %s\nwant %s", got, want)
		}
		if viaMarshal, _ := json.Marshal(r); string(viaMarshal) != string(want) {
			t.Fatalf("response through json.Marshal:\n got %s\nwant %s", viaMarshal, want)
		}
	}
}

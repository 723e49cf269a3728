package wire

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestRequestRoundTrip(t *testing.T) {
	body := `{"model":"default","max_tokens":10,"container":"box","temperature":0.5,"service_tier":"auto",` +
		`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"bash_code_execution","input":{"command":"ls"}},` +
		`{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"bash_code_execution_result","stdout":"a","stderr":"","return_code":0,"content":[]}},` +
		`{"type":"web_search_tool_result","tool_use_id":"x","content":[]}]}]}`
	var r Request
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if r.Container == nil || r.Container.ID != "box" || string(r.Extra["service_tier"]) != `"auto"` {
		t.Fatalf("request = %+v", r)
	}
	if got := r.Messages[0].Content[0]; got.Type != BlockText || got.Text != "hi" {
		t.Fatalf("string content = %+v", got)
	}
	res := r.Messages[1].Content[1].Result
	if res == nil || res.Stdout != "a" || res.Files == nil {
		t.Fatalf("result = %+v", res)
	}
	out, err := json.Marshal(r.Messages[1])
	if err != nil {
		t.Fatal(err)
	}
	want := `{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"bash_code_execution","input":{"command":"ls"}},` +
		`{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"bash_code_execution_result","stdout":"a","stderr":"","return_code":0,"content":[]}},` +
		`{"type":"web_search_tool_result","tool_use_id":"x","content":[]}]}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	var obj ContainerParam
	if err := json.Unmarshal([]byte(`{"id":"b","skills":[{"type":"custom","skill_id":"s1","version":"latest"}]}`), &obj); err != nil || obj.ID != "b" || obj.Skills[0].SkillID != "s1" {
		t.Fatalf("container object = %+v, %v", obj, err)
	}
}

// TestObjectMembers: the top-level scan finds what a decode into a map
// finds, in order.
func TestObjectMembers(t *testing.T) {
	for _, in := range []string{
		`{}`, ` { } `, `null`, `[1,2]`, `"x"`,
		`{"a":1}`,
		` {"a" : 1 , "b":[1,{"c":"]}"}], "d":{"e":{"f":[[]]}},"g":"q\"uote\\","h":true,"i":null,"j":-1.5e+3 } `,
		`{"k\u0065y":"v","k\\ey":{"x":"}{"},"tab\t":[]}`,
		"{\n\t\"msgs\": [{\"role\":\"user\",\"content\":\"a, b } ] \\\" c\"}],\n\t\"n\": 0\n}",
	} {
		var want map[string]json.RawMessage
		_ = json.Unmarshal([]byte(in), &want)
		got := map[string]json.RawMessage{}
		var order []string
		objectMembers([]byte(in), func(k string, v []byte) {
			got[k] = append(json.RawMessage(nil), v...)
			order = append(order, k)
		})
		if len(got) != len(want) || len(order) != len(want) {
			t.Fatalf("%s: got %q, want %q", in, order, want)
		}
		for k, w := range want {
			var a, b any
			if json.Unmarshal(got[k], &a) != nil || json.Unmarshal(w, &b) != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("%s: member %q = %s, want %s", in, k, got[k], w)
			}
		}
	}
}

// BenchmarkDecodeLongHistory decodes a request carrying a 110 KB history
// of fifty messages, as a long conversation sends on every turn.
func BenchmarkDecodeLongHistory(b *testing.B) {
	var msgs []string
	for i := range 50 {
		role := RoleUser
		if i%2 == 1 {
			role = RoleAssistant
		}
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":[{"type":"text","text":%q}]}`, role, strings.Repeat("lorem ipsum dolor sit amet ", 80)))
	}
	body := []byte(`{"model":"default","max_tokens":1024,"service_tier":"auto","messages":[` + strings.Join(msgs, ",") + `]}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var r Request
		if err := r.UnmarshalJSON(body); err != nil || len(r.Messages) != 50 || len(r.Extra) != 1 {
			b.Fatal(err, len(r.Messages), r.Extra)
		}
	}
}

// TestMarshalMessages: the history's own encoder says what json.Marshal
// says.
func TestMarshalMessages(t *testing.T) {
	var req Request
	in := `{"model":"m","max_tokens":1,"messages":[
		{"role":"user","content":"plain <b>&</b> \"text\"\n"},
		{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_use","id":"toolu_1","name":"f","input":{"x":[1,2]}},
			{"type":"mystery_block","payload":{"deep":[true,null]}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"ok"}],"is_error":true}]},
		{"role":"assistant"}]}`
	if err := req.UnmarshalJSON([]byte(in)); err != nil {
		t.Fatal(err)
	}
	for _, msgs := range [][]Message{req.Messages, nil, {}} {
		got, err := MarshalMessages(msgs)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(msgs)
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("invalid JSON %s: %v", got, err)
		}
		_ = json.Unmarshal(want, &w)
		if w == nil {
			w = []any{} // json.Marshal says null for no messages; an empty array is as good
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	}
}

// TestCacheControlKept: the cache_control breakpoint of a text, tool_use or
// tool_result block goes on with the block, as the client wrote it; other
// blocks written anew (thinking) have none.
func TestCacheControlKept(t *testing.T) {
	var req Request
	in := `{"model":"m","max_tokens":1,"messages":[
		{"role":"user","content":[{"type":"text","text":"doc","cache_control":{"type":"ephemeral","ttl":"1h"}}]},
		{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s","cache_control":{"type":"ephemeral"}},
			{"type":"tool_use","id":"toolu_1","name":"f","input":{},"cache_control":{"type":"ephemeral"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok","cache_control":{"type":"ephemeral"}}]}]}`
	if err := req.UnmarshalJSON([]byte(in)); err != nil {
		t.Fatal(err)
	}
	got, err := MarshalMessages(req.Messages)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"role":"user","content":[{"type":"text","text":"doc","cache_control":{"type":"ephemeral","ttl":"1h"}}]},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},` +
		`{"type":"tool_use","id":"toolu_1","name":"f","input":{},"cache_control":{"type":"ephemeral"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok","cache_control":{"type":"ephemeral"}}]}]`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// BenchmarkEncodeLongHistory encodes the history BenchmarkDecodeLongHistory
// decodes, as every step sends it upstream.
func BenchmarkEncodeLongHistory(b *testing.B) {
	msgs := make([]Message, 51)
	for i := range msgs {
		msgs[i] = Message{Role: RoleUser, Content: []ContentBlock{{Type: BlockText, Text: strings.Repeat("lorem ipsum dolor sit amet ", 80)}}}
	}
	for b.Loop() {
		if _, err := MarshalMessages(msgs); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMessageContentShapes: content as a string, an array (split by hand
// after the request's own check), null, or anything else (refused).
func TestMessageContentShapes(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    []string // block types; nil = no content
		bad     bool
	}{
		{`"hi"`, []string{BlockText}, false},
		{`[]`, []string{}, false},
		{` [ {"type":"text","text":"a, ] }"} ,
		   {"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"x"}]} ] `, []string{BlockText, BlockToolResult}, false},
		{`null`, nil, false},
		{`[{"type":"mystery","x":[1,{"y":"]"}]}]`, []string{"mystery"}, false},
		{`12`, nil, true},
		{`{"type":"text","text":"a"}`, nil, true},
		{`[{"text":"no type"}]`, nil, true},
		{`[null]`, nil, true},
	} {
		var r Request
		err := r.UnmarshalJSON([]byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":` + tc.content + `}]}`))
		if tc.bad {
			if err == nil {
				t.Errorf("%s: accepted", tc.content)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.content, err)
		}
		var got []string
		if c := r.Messages[0].Content; c != nil {
			got = []string{}
			for _, b := range c {
				got = append(got, b.Type)
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: blocks %q, want %q", tc.content, got, tc.want)
		}
	}
}

// TestRequestFieldNamesAreCaseSensitive: encoding/json would take "Model"
// for "model"; the request names its fields exactly, as the Anthropic API
// does, and says which one was meant.
func TestRequestFieldNamesAreCaseSensitive(t *testing.T) {
	for _, body := range []string{`{"Model":"x","max_tokens":1,"messages":[]}`, `{"model":"x","STREAM":true,"messages":[]}`, `{"model":"x","max_Tokens":5}`} {
		var r Request
		err := r.UnmarshalJSON([]byte(body))
		if err == nil || !strings.Contains(err.Error(), "case-sensitive") {
			t.Errorf("%s: %v (%+v)", body, err, r)
		}
	}
	var r Request
	if err := r.UnmarshalJSON([]byte(`{"model":"x","max_tokens":1,"service_tier":"auto","Other":1}`)); err != nil || len(r.Extra) != 2 {
		t.Fatalf("unknown fields: %v %v", err, r.Extra)
	}
}

// TestBlockDeltaMarshal checks each delta's encoding: its type, then the
// field of its payload, present even when empty, escaped as encoding/json
// escapes a string (HTML characters, line separators, invalid UTF-8); a
// delta of another type keeps the fields it has.
func TestBlockDeltaMarshal(t *testing.T) {
	for _, tt := range []struct {
		d    BlockDelta
		want string
	}{
		{BlockDelta{Type: DeltaText, Text: "hi"}, `{"type":"text_delta","text":"hi"}`},
		{BlockDelta{Type: DeltaText}, `{"type":"text_delta","text":""}`},
		{BlockDelta{Type: DeltaText, Text: "<a&b>\u2028\"\\\xff"}, `{"type":"text_delta","text":"\u003ca\u0026b\u003e\u2028\"\\\ufffd"}`},
		{BlockDelta{Type: DeltaInputJSON, PartialJSON: `{"a":`}, `{"type":"input_json_delta","partial_json":"{\"a\":"}`},
		{BlockDelta{Type: DeltaInputJSON}, `{"type":"input_json_delta","partial_json":""}`},
		{BlockDelta{Type: DeltaThinking, Thinking: "hmm"}, `{"type":"thinking_delta","thinking":"hmm"}`},
		{BlockDelta{Type: DeltaSignature}, `{"type":"signature_delta","signature":""}`},
		{BlockDelta{Type: "citations_delta", Citation: json.RawMessage(`{"type":"char_location"}`)}, `{"type":"citations_delta","citation":{"type":"char_location"}}`},
		{BlockDelta{Type: "other_delta", Text: "x"}, `{"type":"other_delta","text":"x"}`},
	} {
		got, err := json.Marshal(tt.d)
		if err != nil || string(got) != tt.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tt.d, got, err, tt.want)
		}
	}
}

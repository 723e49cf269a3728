package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"threadbox/domain/jsonfield"
)

// TestFastDecodeMatchesSlow: a response and a content block decode to what
// encoding/json alone gives, with the same errors, whether or not the
// hand-written path takes them: the common reply, escapes, other block
// types, keys in other case, nulls, repeated keys, values of the wrong
// kind, not an object at all.
func TestFastDecodeMatchesSlow(t *testing.T) {
	responses := []string{
		`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok, done."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`,
		` { "id" : "msg_2" , "content" : [ { "type" : "text" , "text" : "a" , "citations" : null } , {"text":"b","type":"text","extra":1} ] , "stop_sequence" : "<s>" } `,
		`{"id":"esc\"aped\n","content":[{"type":"text","text":"line\nbreak \u00e9"}]}`,
		`{"content":[{"type":"text","text":"c","citations":[{"type":"char_location"}]}]}`,
		`{"content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}],"stop_reason":"tool_use"}`,
		`{"content":[{"type":"mystery","x":1},{"type":"text","text":"t"}]}`,
		`{"Content":[{"type":"text","text":"folded"}],"ID":"folded"}`,
		`{"content":[{"TYPE":"text","Text":"folded"}]}`,
		`{"content":[{"type":"text","text":"t","input":{"a":1}}]}`,
		`{"id":null,"content":null,"stop_reason":null,"usage":null}`,
		`{"id":"a","id":"b","usage":{"input_tokens":1},"usage":{"output_tokens":2}}`,
		`{"id":5}`, `{"content":{}}`, `{"content":[1]}`, `{"stop_sequence":7}`, `{"usage":"x"}`,
		`{"content":[{"type":"text","text":5}]}`, `{"content":[{"type":7}]}`,
		`null`, `[]`, `"str"`, `{}`, `{"bad":"\xff"}`, `{"id":"\xff"}`,
		`{"container":{"id":"c","expires_at":"2026-12-03T18:00:00Z"},"content":[]}`,
		`{"usage":{"input_tokens":-3,"output_tokens":0,"cache_read_input_tokens":null,"other":{"a":1}}}`,
		`{"usage":{"input_tokens":1.5}}`, `{"usage":{"input_tokens":1e3}}`, `{"usage":{"input_tokens":"1"}}`,
		`{"usage":{"Input_Tokens":4}}`, `{"usage":{"input_tokens":99999999999999999999999}}`, `{"usage":{"input_tokens":-}}`,
		`{"usage":{"input_tokens":1,"server_tool_use":{"code_execution_requests":2}}}`, `{"usage":[]}`,
	}
	for _, in := range responses {
		type plain Response
		var want plain
		wantErr := json.Unmarshal([]byte(in), &want)
		var got Response
		gotErr := json.Unmarshal([]byte(in), &got)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("%s: error %v, encoding/json %v", in, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, Response(want)) {
			t.Fatalf("%s:\n got %+v\nwant %+v", in, got, want)
		}
	}
	blocks := []string{
		`{"type":"text","text":"plain"}`, `{"type":"text","text":"a\tb"}`, `{"type":"text"}`, `{"type":"text","text":null}`,
		`{"type":"text","text":"c","citations":null}`, `{"type":"text","text":"c","citations":[]}`,
		`{"type":"thinking","thinking":"t","signature":"s"}`, `{"type":"Text","text":"x"}`, `{"Type":"text","text":"x"}`,
		`{"type":"text","text":"x","is_error":true}`, `{"text":"x"}`, `[]`, `{"type":"text","text":"\xff"}`,
		`{"type":"text","text":"c","cache_control":{"type":"ephemeral"}}`, `{"type":"text","text":"c","cache_control":null}`,
		`{"type":"text","text":"c","cache_control":{"type":"ephemeral"},"cache_control":null}`,
		`{"type":"text","text":"c","Cache_Control":{"type":"ephemeral"}}`,
	}
	for _, in := range blocks {
		var want ContentBlock
		wantErr := want.decode([]byte(in))
		var got ContentBlock
		gotErr := json.Unmarshal([]byte(in), &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("%s: error %v, encoding/json %v", in, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", in, got, want)
		}
	}
}

// TestFastRequestMatchesSlow: a request decodes to what the decoder through
// encoding/json gives, with the same errors, whether or not the
// hand-written path takes it.
func TestFastRequestMatchesSlow(t *testing.T) {
	for _, in := range []string{
		`{"model":"default","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`,
		`{"model":"default","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hello"}]}`,
		` { "messages" : [ { "content" : [ {"type":"text","text":"a"} , {"type":"text","text":"b"} ] , "role" : "user" } , {"role":"assistant","content":[]} ] , "stream" : false , "max_tokens" : null , "model" : null } `,
		`{"messages":[{"role":"user","content":"esc\"aped"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`,
		`{"messages":[{"role":"user","content":null}],"stream":null}`,
		`{"messages":[{"role":"user","content":"x","extra":1}]}`,
		`{"messages":[{"Role":"user","content":"x"}]}`, `{"Model":"m","model":"n"}`, `{"\u006dodel":"m"}`,
		`{"model":"m","model":"n","messages":[],"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","service_tier":"auto"}`, `{"model":"m","tools":[]}`, `{"model":"m","system":"s"}`,
		`{"max_tokens":1.5}`, `{"max_tokens":"5"}`, `{"stream":1}`, `{"messages":{}}`, `{"messages":[1]}`, `{"messages":[[]]}`,
		`{"model":5}`, `{"messages":[{"role":"user","content":5}]}`,
		`[]`, `null`, `{}`, `"x"`, `{"model":`, ``, `{"model":"\xff"}`,
	} {
		var want Request
		wantErr := want.decode([]byte(in))
		var got Request
		gotErr := got.UnmarshalJSON([]byte(in))
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("%s: error %v, encoding/json %v", in, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", in, got, want)
		}
	}
}

// TestRequestTypeErrorNamesTheField: a request with a value of the wrong
// type is refused with the value's path in the request as the client
// wrote it and what it must be, wherever the value is: a top-level field,
// a message, a content block, a tool, the container, a tool result's
// content.
func TestRequestTypeErrorNamesTheField(t *testing.T) {
	tests := []struct{ body, want string }{
		{`{"model":"m","max_tokens":"64","messages":[]}`, "max_tokens: must be an integer"},
		{`{"model":"m","max_tokens":1.5,"messages":[]}`, "max_tokens: must be an integer"},
		{`{"model":5}`, "model: must be a string"},
		{`{"stream":"yes"}`, "stream: must be true or false"},
		{`{"temperature":"hot"}`, "temperature: must be a number"},
		{`{"top_k":1.5}`, "top_k: must be an integer"},
		{`{"stop_sequences":"x"}`, "stop_sequences: must be an array"},
		{`{"stop_sequences":["x",1]}`, "stop_sequences.1: must be a string"},
		{`{"messages":{}}`, "messages: must be an array"},
		{`{"messages":["hi"]}`, "messages.0: must be an object"},
		{`{"messages":[{"role":"user","content":"a"},{"role":7,"content":"b"}]}`, "messages.1.role: must be a string"},
		{`{"messages":[{"role":"user","content":5}]}`, "messages.0.content: must be a string or an array"},
		{`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":5}]}]}`, "messages.0.content.1.text: must be a string"},
		{`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":"no"}]}]}`, "messages.0.content.0.is_error: must be true or false"},
		{`{"messages":[{"role":"user","content":["a"]}]}`, "messages.0.content.0: must be an object"},
		{`{"messages":[{"role":"assistant","content":[{"type":"bash_code_execution_tool_result","tool_use_id":"s","content":{"type":"bash_code_execution_result","return_code":"0"}}]}]}`, "messages.0.content.0.content.return_code: must be an integer"},
		{`{"messages":[{"role":"assistant","content":[{"type":"bash_code_execution_tool_result","tool_use_id":"s","content":{"type":"bash_code_execution_result","content":[7]}}]}]}`, "messages.0.content.0.content.content.0: must be an object"},
		{`{"tools":{}}`, "tools: must be an array"},
		{`{"tools":[{"name":"a"},{"name":1}]}`, "tools.1.name: must be a string"},
		{`{"container":5}`, "container: must be a string or an object"},
		{`{"container":{"id":"c","skills":[{"skill_id":3}]}}`, "container.skills.0.skill_id: must be a string"},
		{`{"Max_Tokens":"x"}`, "Max_Tokens: must be an integer"},
		{`[]`, "must be an object"},
		{`"hi"`, "must be an object"},
	}
	for _, tc := range tests {
		var r Request
		err := r.UnmarshalJSON([]byte(tc.body))
		if _, ok := errors.AsType[*jsonfield.FieldError](err); !ok || err.Error() != tc.want {
			t.Errorf("%s: %v (%T), want %q", tc.body, err, err, tc.want)
		}
	}
}

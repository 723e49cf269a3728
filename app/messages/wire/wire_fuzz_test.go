package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzRequestUnmarshalJSON: no body panics the decoder; a body it accepts
// is valid JSON whose unknown members are kept byte for byte in Extra, and
// the request encodes to a body that decodes to the same encoding.
func FuzzRequestUnmarshalJSON(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":5,"service_tier":"auto","x":{"a":[1,"]",{"b":"}"}]},"messages":[{"role":"user","content":[{"type":"text","text":"a\"b"}]}]}`,
		`{"messages":[{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"bash_code_execution","input":{"command":"ls"}},{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"bash_code_execution_result","stdout":"","stderr":"","return_code":0,"content":[]}}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"x"}],"is_error":true}]}],"container":"container_01"}`,
		`{"tools":[{"type":"code_execution_20250825","name":"code_execution"},{"name":"f","description":"d","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto"}}`,
		`{"\u006dodel":"m","a\"b":1,"a":1,"a":2}`,
		`{"Model":"m","model":"n"}`,
		`{"system":[{"type":"text","text":"s"}],"stream":true,"metadata":{"user_id":"u"},"thinking":{"type":"enabled","budget_tokens":1024}}`,
		` { "messages" : [ ] , "z" : null } `,
		`[]`, `null`, `{}`, `{"messages":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Request
		if err := r.UnmarshalJSON(data); err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		var members map[string]json.RawMessage
		if json.Unmarshal(data, &members) == nil {
			for k, v := range members {
				if requestFields[k] {
					continue
				}
				if got, ok := r.Extra[k]; !ok || !bytes.Equal(got, v) {
					t.Fatalf("unknown member %q = %s kept as %s (%v) from %q", k, v, got, ok, data)
				}
			}
			for k := range r.Extra {
				if _, ok := members[k]; !ok || requestFields[k] {
					t.Fatalf("Extra has %q, not an unknown member of %q", k, data)
				}
			}
		}
		enc, err := r.MarshalJSON()
		if err != nil {
			return // a decoded value the encoder refuses (say, a block of no known type) is refused
		}
		var r2 Request
		if err := r2.UnmarshalJSON(enc); err != nil {
			t.Fatalf("re-decode of %s (from %q): %v", enc, data, err)
		}
		enc2, err := r2.MarshalJSON()
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip of %q:\n%s\n%s (%v)", data, enc, enc2, err)
		}
	})
}

// FuzzFastPathsMatchSlow: whatever the bytes, the hand-written fast paths
// (a request of the common shape, a reply of plain text blocks) decode to
// what encoding/json alone gives, with the same errors.
func FuzzFastPathsMatchSlow(f *testing.F) {
	for _, s := range []string{
		`{"model":"default","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`,
		`{"model":"m","max_tokens":64,"stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`,
		`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":3}}`,
		`{"content":[{"type":"text","text":"a","citations":null}],"usage":{"input_tokens":1e3}}`,
		`{"Model":"m","model":"n","messages":[{"Role":"user","content":"x"}]}`,
		`{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"run"}],"tools":[{"type":"code_execution_20250825","name":"code_execution"}],"container":"cont_1"}`,
		`{"model":"m","max_tokens":8,"messages":[],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto"},"container":{"id":"c","skills":[{"type":"custom","skill_id":"s"}]},"system":[{"type":"text","text":"s"}],"temperature":0.5,"top_k":3,"top_p":null,"stop_sequences":["x"],"metadata":{"user_id":"u"},"thinking":{"type":"enabled","budget_tokens":1024}}`,
		`{"tools":null,"container":null,"system":null,"tools":[{"name":"a"}],"tools":[{"type":"x"}],"container":"a","container":{"id":"b"}}`,
		`{"temperature":"hot","top_k":1.5,"stop_sequences":"x","tools":{}}`,
		`{"id":"a","id":"b"}`, `{"usage":{"input_tokens":-}}`, `[]`, `null`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want Request
		wantErr := want.decode(data)
		var got Request
		gotErr := got.UnmarshalJSON(data)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("request %q: error %v, encoding/json %v", data, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("request %q:\n got %+v\nwant %+v", data, got, want)
		}
		type plain Response
		var wantR plain
		wantErr = json.Unmarshal(data, &wantR)
		var gotR Response
		gotErr = json.Unmarshal(data, &gotR)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("response %q: error %v, encoding/json %v", data, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(gotR, Response(wantR)) {
			t.Fatalf("response %q:\n got %+v\nwant %+v", data, gotR, wantR)
		}
	})
}

package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"threadbox/domain/jsonfield"
)

// FuzzRequestUnmarshalJSON: no body panics the decoder; a body it refuses
// for a value of the wrong type is refused in the client's terms (a
// jsonfield.FieldError, never encoding/json's, which names Go types); a body
// it accepts is valid JSON whose unknown members are kept byte for byte in
// Extra, and the request encodes to a body that decodes to the same
// encoding.
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
		`{"max_tokens":"5","messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`,
		`{"container":5,"tools":[{"name":[]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Request
		if err := r.UnmarshalJSON(data); err != nil {
			if _, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
				t.Fatalf("%q: refused in encoding/json's terms: %v", data, err)
			}
			if te, ok := errors.AsType[*jsonfield.FieldError](err); ok {
				written := stringsOf(data)
				for seg := range strings.SplitSeq(te.Path, ".") {
					if te.Path != "" && !written[seg] && strings.Trim(seg, "0123456789") != "" {
						t.Fatalf("%q: refused naming %q, which it does not have: %v", data, seg, err)
					}
				}
			}
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

// stringsOf returns every string of the JSON value data, keys and values,
// unescaped.
func stringsOf(data []byte) map[string]bool {
	out := map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		if s, ok := tok.(string); ok {
			out[s] = true
		}
	}
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
		`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`,
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

// FuzzEventMarshalMatchesReflect holds Event.MarshalJSON's fast path to
// json.Marshal's encoding of the same event (marshalReflect): events decoded
// from any stream event's JSON, and events of every kind built around any
// text.
func FuzzEventMarshalMatchesReflect(f *testing.F) {
	for _, s := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi <b> & \u2028"}}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"a","citations":[]}}`,
		`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}`,
		`{"type":"content_block_stop","index":7}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`,
		`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":"x","container":{"id":"c","expires_at":"2026-01-01T00:00:00Z"}},"usage":{"input_tokens":1,"output_tokens":2,"server_tool_use":{"code_execution_requests":1}}}`,
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":0}}}`,
		`{"type":"message_stop"}`, `{"type":"ping"}`, `{"type":"error","error":{"type":"api_error","message":"x"}}`,
		`{"type":"threadbox_tool_output","tool_use_id":"s","stream":"stdout","text":"a","elapsed_ms":1}`,
		`{"type":"content_block_delta","index":-3,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}`,
		`{"type":"content_block_delta","index":0}`, `{"type":"message_delta"}`, `{"type":"message_start"}`,
	} {
		f.Add([]byte(s), "text <&> \u2028 \xff", 3)
	}
	check := func(t *testing.T, e Event) {
		t.Helper()
		got, gerr := e.MarshalJSON()
		want, werr := e.marshalReflect()
		if (gerr != nil) != (werr != nil) {
			t.Fatalf("%s: errors differ: %v, %v", e.Type, gerr, werr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("%s:\nfast    %s\nreflect %s", e.Type, got, want)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, text string, index int) {
		var e Event
		if e.UnmarshalJSON(data) == nil {
			check(t, e)
		}
		stop := text
		for _, e := range []Event{
			{Type: EventContentBlockDelta, Index: index, Delta: &BlockDelta{Type: DeltaText, Text: text}},
			{Type: EventContentBlockStart, Index: index, ContentBlock: &ContentBlock{Type: BlockText, Text: text}},
			{Type: EventContentBlockStop, Index: index},
			{Type: EventMessageDelta, MessageDelta: &MessageDelta{StopReason: text, StopSequence: &stop}, Usage: &Usage{OutputTokens: index}},
			{Type: EventMessageDelta, MessageDelta: &MessageDelta{}},
			{Type: EventMessageStart, Message: &Response{ID: text, Type: "message", Role: RoleAssistant, Model: text, Content: []ContentBlock{{Type: BlockText, Text: text}}}},
			{Type: text},
		} {
			check(t, e)
		}
	})
}

// FuzzEventUnmarshalMatchesReflect holds Event.UnmarshalJSON's fast path
// to json.Unmarshal's decoding (unmarshalReflect): the same event, or an
// error from both.
func FuzzEventUnmarshalMatchesReflect(f *testing.F) {
	for _, s := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi <b> \n \u2028"}}`,
		`{"index":3,"delta":{"text":"x","type":"text_delta"},"type":"content_block_delta"}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a","Text":"b"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`,
		`{"type":"content_block_delta","index":1e2,"delta":{"type":"text_delta","text":"a"}}`,
		`{"type":"content_block_delta","index":null,"delta":null}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"a","citations":null}}`,
		`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}`,
		`{"type":"content_block_stop","index":7}`, `{"type":"content_block_stop","index":-0}`,
		`{"type":"content_block_stop","index":99999999999999999999}`,
		`{"type":"message_stop"}`, `{"type":"ping"}`, `{"type":"ping","type":"message_stop"}`, `{"Type":"ping"}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`,
		`{"type":"error","error":{"type":"api_error","message":"x"}}`, `{"type":"p\u0069ng"}`,
		`null`, `[]`, `{}`, `{"type":1}`, `{"type":"ping"`, ` {"type" : "ping"} `,
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":0}}}`,
		`{"type":"message_start","message":{"id":"m","content":[{"type":"text","text":"a"}],"usage":{"input_tokens":1,"cache_read_input_tokens":2}}}`,
		`{"type":"message_start","message":null}`, `{"type":"message_start","message":[]}`, `{"message":{},"type":"message_start"}`,
		`{"type":"message_start","message":{"usage":{"input_tokens":"x"}}}`, `{"type":"message_start","Message":{}}`,
		`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":"x","container":{"id":"c","expires_at":"2026-01-01T00:00:00Z"}},"usage":{"input_tokens":1,"output_tokens":2,"server_tool_use":{"code_execution_requests":1}}}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":null}`, `{"type":"message_delta","delta":null,"usage":{}}`,
		`{"usage":{"output_tokens":3},"delta":{},"type":"message_delta"}`, `{"type":"message_delta","delta":{"stop_reason":1},"usage":{}}`,
		`{"type":"message_delta","delta":{},"usage":{"output_tokens":1.5}}`, `{"type":"message_delta","delta":{},"usage":{},"usage":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want Event
		gerr := got.UnmarshalJSON(data)
		werr := want.unmarshalReflect(data)
		if (gerr != nil) != (werr != nil) {
			t.Fatalf("%q: errors differ: %v, %v", data, gerr, werr)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nfast    %+v\nreflect %+v", data, got, want)
		}
	})
}

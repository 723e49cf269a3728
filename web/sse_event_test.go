package web

import (
	"bytes"
	"encoding/json"
	"testing"

	"threadbox/app/messages/wire"
)

// FuzzMarshalEventIsMarshal holds marshalEvent to json.Marshal for every
// kind of Messages API event, whatever text and tool input it carries
// (HTML characters, line separators, spaces in the input's JSON).
func FuzzMarshalEventIsMarshal(f *testing.F) {
	f.Add("hello", []byte(`{"a": 1}`))
	f.Add("<b>&amp;</b>\u2028\u2029\"\\", []byte(`{"cmd":"echo <x> && ls"}`))
	f.Add("", []byte(` [1, 2 ,{"k" : "v"}] `))
	f.Add("\x00\xff", []byte(`"\u003c"`))
	f.Fuzz(func(t *testing.T, text string, input []byte) {
		raw := json.RawMessage(input)
		if !json.Valid(input) {
			raw = nil
		}
		stop := text
		events := []wire.Event{
			{Type: wire.EventMessageStart, Message: &wire.Response{ID: "msg_1", Type: "message", Role: "assistant", Model: text,
				Content: []wire.ContentBlock{{Type: "text", Text: text}, {Type: "tool_use", ID: "toolu_1", Name: text, Input: raw}}}},
			{Type: wire.EventContentBlockStart, Index: 1, ContentBlock: &wire.ContentBlock{Type: "text", Text: text}},
			{Type: wire.EventContentBlockStart, Index: 2, ContentBlock: &wire.ContentBlock{Type: "server_tool_use", ID: "srvtoolu_1", Name: text, Input: raw}},
			{Type: wire.EventContentBlockDelta, Delta: &wire.BlockDelta{Type: wire.DeltaText, Text: text}},
			{Type: wire.EventContentBlockDelta, Delta: &wire.BlockDelta{Type: "input_json_delta", PartialJSON: text}},
			{Type: wire.EventContentBlockStop, Index: 3},
			{Type: wire.EventMessageDelta, MessageDelta: &wire.MessageDelta{StopReason: text, StopSequence: &stop}, Usage: &wire.Usage{OutputTokens: 3}},
			{Type: wire.EventError, Error: &wire.ErrorBody{Type: "api_error", Message: text}},
			{Type: wire.EventToolOutput, Output: &wire.ToolOutput{ToolUseID: "srvtoolu_1", Stream: "stdout", Text: text, ElapsedMs: 5}},
			{Type: wire.EventPing},
			{Type: text},
		}
		for _, ev := range events {
			want, werr := json.Marshal(ev)
			got, gerr := marshalEvent(ev)
			if (werr != nil) != (gerr != nil) {
				t.Fatalf("%s: errors differ: marshalEvent %v, json.Marshal %v", ev.Type, gerr, werr)
			}
			if werr == nil && !bytes.Equal(got, want) {
				t.Fatalf("%s:\nmarshalEvent %s\njson.Marshal %s", ev.Type, got, want)
			}
		}
	})
}

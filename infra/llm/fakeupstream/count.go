package fakeupstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode"
)

// countFields are the fields Anthropic's token count endpoint
// (POST /v1/messages/count_tokens) accepts; it refuses any other, such as
// max_tokens or stream, as a real provider does.
var countFields = map[string]bool{
	"model": true, "messages": true, "system": true, "tools": true, "tool_choice": true,
	"thinking": true, "mcp_servers": true, "context_management": true, "output_config": true,
}

// CountTokens is how the fake counts a count_tokens body's input tokens: a
// token per run of letters or digits and per other non-space character of
// its messages, system prompt and tools as sent. It is no tokenizer; it
// gives a count the estimate of four characters per token would not.
func CountTokens(body json.RawMessage) int {
	var parts map[string]json.RawMessage
	if json.Unmarshal(body, &parts) != nil {
		return 0
	}
	n := 0
	for _, k := range []string{"messages", "system", "tools"} {
		inWord := false
		for _, r := range string(parts[k]) {
			word := unicode.IsLetter(r) || unicode.IsDigit(r)
			switch {
			case word && !inWord:
				n++
			case !word && !unicode.IsSpace(r):
				n++
			}
			inWord = word
		}
	}
	return n
}

// refuseCount returns why Anthropic would refuse the count_tokens body, or
// "": the Messages rules, a model, and no field the endpoint does not take.
func refuseCount(raw json.RawMessage) string {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return "invalid request body: " + err.Error()
	}
	var extra []string
	for k := range fields {
		if !countFields[k] {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		return fmt.Sprintf("%s: Extra inputs are not permitted", strings.Join(extra, ", "))
	}
	var model string
	if json.Unmarshal(fields["model"], &model) != nil || model == "" {
		return "model: Field required"
	}
	return refuseAnthropic(raw)
}

// serveCount answers POST /v1/messages/count_tokens.
func (s *Server) serveCount(w http.ResponseWriter, r *http.Request) {
	var body json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(Anthropic, w, Reply{Status: http.StatusBadRequest, ErrorType: "invalid_request_error", ErrorMessage: "bad json"})
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Format: Anthropic, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	refusal := refuseCount(body)
	if refusal != "" {
		s.refused = append(s.refused, refusal)
	}
	s.mu.Unlock()
	if refusal != "" {
		writeError(Anthropic, w, Reply{Status: http.StatusBadRequest, ErrorType: "invalid_request_error", ErrorMessage: refusal})
		return
	}
	writeJSON(w, map[string]int{"input_tokens": CountTokens(body)})
}

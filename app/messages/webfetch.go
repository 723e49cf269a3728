package messages

import (
	"encoding/json"
	"net/url"
	"strings"

	"threadbox/app/messages/wire"
)

// webFetchDefinition is the web_fetch tool as the model sees it: a client
// tool taking a URL, which the loop runs (the upstream never gets the
// server tool's type).
var webFetchDefinition = encoded([]ToolDefinition{{
	Name: wire.SubToolWebFetch,
	Description: "Fetch the content of a web page or PDF at a URL. The URL must have appeared in the conversation " +
		"(given by the user or in an earlier result). Returns the document's text (or the PDF) with its title.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"url":{"type":"string","description":"The URL to fetch (http or https)"}},"required":["url"]}`),
}})[0]

func isWebFetchType(t string) bool {
	return t == wire.ToolTypeWebFetch2509 || t == wire.ToolTypeWebFetch2602
}

// maxFetchURL bounds a web_fetch URL's length.
const maxFetchURL = 2048

// fetchRefusal returns the error result of a web_fetch call refused before
// it runs: a bad input, a URL too long or not in the conversation, or one
// call more than the tool's max_uses; nil lets it run.
func (t *turn) fetchRefusal(call ToolCall) *wire.ToolResult {
	if w := t.plan.WebFetch; w != nil && w.MaxUses > 0 && t.fetches >= w.MaxUses {
		return wire.WebFetchError(wire.FetchMaxUsesExceeded)
	}
	var in struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(call.Input, &in) != nil || in.URL == "" {
		return wire.WebFetchError(wire.FetchInvalidInput)
	}
	if len(in.URL) > maxFetchURL {
		return wire.WebFetchError(wire.FetchURLTooLong)
	}
	if u, err := url.Parse(in.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return wire.WebFetchError(wire.FetchInvalidInput)
	}
	if !strings.Contains(t.conversation(), in.URL) {
		return wire.WebFetchError(wire.FetchURLNotInContext)
	}
	return nil
}

// conversation returns the text a web_fetch URL must appear in: the
// request's messages and the turn's results so far.
func (t *turn) conversation() string {
	if t.context == nil {
		t.context = &strings.Builder{}
		for _, m := range t.req.Messages {
			for _, b := range m.Content {
				t.context.WriteString(b.Text)
				t.context.WriteByte('\n')
				if raw, err := json.Marshal(b); err == nil {
					t.context.WriteString(unescapeJSON(string(raw)))
					t.context.WriteByte('\n')
				}
			}
		}
	}
	return t.context.String()
}

// noteContext adds a result of the turn to the conversation's text.
func (t *turn) noteContext(r *wire.ToolResult) {
	if t.context == nil || r == nil {
		return
	}
	if raw, err := json.Marshal(r); err == nil {
		t.context.WriteString(unescapeJSON(string(raw)))
		t.context.WriteByte('\n')
	}
}

// unescapeJSON undoes the escapes encoding/json writes for HTML's sake,
// which a URL's '&' would otherwise hide behind.
func unescapeJSON(s string) string {
	return strings.NewReplacer(`\u0026`, "&", `\u003c`, "<", `\u003e`, ">", `\/`, "/").Replace(s)
}

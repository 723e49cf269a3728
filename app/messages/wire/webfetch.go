package wire

import (
	"encoding/json"

	"threadbox/domain/jsonfield"
)

// The web_fetch server tool, which threadbox runs itself (app/fetchtool):
// its tool types, the name the model calls, its result block and the
// result's two shapes, a fetched document or an error.
const (
	ToolTypeWebFetch2509 = "web_fetch_20250910"
	ToolTypeWebFetch2602 = "web_fetch_20260209"
	SubToolWebFetch      = "web_fetch"
	BlockWebFetchResult  = "web_fetch_tool_result"
	ResultWebFetch       = "web_fetch_result"
	ResultWebFetchError  = "web_fetch_tool_result_error"
)

// Error codes of web_fetch_tool_result_error, as the SDKs type them.
const (
	FetchInvalidInput       = "invalid_tool_input"
	FetchURLTooLong         = "url_too_long"
	FetchURLNotAllowed      = "url_not_allowed"
	FetchURLNotInContext    = "url_not_in_prior_context"
	FetchURLNotAccessible   = "url_not_accessible"
	FetchUnsupportedContent = "unsupported_content_type"
	FetchTooManyRequests    = "too_many_requests"
	FetchMaxUsesExceeded    = "max_uses_exceeded"
	FetchUnavailable        = "unavailable"
	FetchContentTooLarge    = "content_too_large"
)

// WebFetchTool is the part of a web_fetch tool's definition threadbox
// honours; the rest (cache_control, defer_loading, strict) is accepted and
// has no effect here.
type WebFetchTool struct {
	AllowedDomains   []string `json:"allowed_domains"`
	BlockedDomains   []string `json:"blocked_domains"`
	MaxUses          int      `json:"max_uses"`
	MaxContentTokens int      `json:"max_content_tokens"`
	Citations        *struct {
		Enabled bool `json:"enabled"`
	} `json:"citations"`
}

// WebFetchToolOf reads the options of a web_fetch tool definition.
func WebFetchToolOf(t Tool) (WebFetchTool, error) {
	var w WebFetchTool
	if len(t.Raw) == 0 {
		return w, nil
	}
	err := json.Unmarshal(t.Raw, &w)
	return w, err
}

// FetchedDocument is a successful web_fetch result: the URL fetched, when,
// and the document (text, or a PDF in base64).
type FetchedDocument struct {
	URL         string
	RetrievedAt string // RFC 3339
	Title       string
	MediaType   string // "text/plain" or "application/pdf"
	Data        string // the text, or the PDF in base64
	Citations   bool
}

// WebFetchResult returns the result of a web_fetch call that fetched d.
func WebFetchResult(d FetchedDocument) *ToolResult {
	type source struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	}
	type citations struct {
		Enabled bool `json:"enabled"`
	}
	type document struct {
		Type      string    `json:"type"`
		Source    source    `json:"source"`
		Title     string    `json:"title"`
		Citations citations `json:"citations"`
	}
	src := source{Type: "text", MediaType: "text/plain", Data: d.Data}
	if d.MediaType == "application/pdf" {
		src = source{Type: "base64", MediaType: d.MediaType, Data: d.Data}
	}
	body, _ := json.Marshal(struct {
		Type        string   `json:"type"`
		URL         string   `json:"url"`
		RetrievedAt string   `json:"retrieved_at"`
		Content     document `json:"content"`
	}{ResultWebFetch, d.URL, d.RetrievedAt, document{BlockDocument, src, d.Title, citations{d.Citations}}})
	return &ToolResult{Type: ResultWebFetch, Body: body}
}

// WebFetchError returns the error result of a web_fetch call.
func WebFetchError(code string) *ToolResult {
	return &ToolResult{Type: ResultWebFetchError, ErrorCode: code}
}

// webFetchResultOf decodes the content of a web_fetch_tool_result block.
func webFetchResultOf(content json.RawMessage) (*ToolResult, error) {
	var head struct {
		Type      string `json:"type"`
		ErrorCode string `json:"error_code"`
	}
	if err := jsonfield.Unmarshal(content, &head); err != nil {
		return nil, err
	}
	switch head.Type {
	case ResultWebFetchError:
		return WebFetchError(head.ErrorCode), nil
	case ResultWebFetch:
		return &ToolResult{Type: ResultWebFetch, Body: append(json.RawMessage(nil), content...)}, nil
	}
	return nil, resultTypeError(BlockWebFetchResult)
}

package wire

import (
	"encoding/json"
	"fmt"
	"strings"

	"golang.org/x/net/idna"

	"threadbox/domain/egress"
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

// CheckDomains refuses an entry of allowed_domains or blocked_domains that
// covers no host (DomainHost): it would match nothing, and a blocked one
// would block nothing. The error names the entry's field and index
// ("blocked_domains.1").
func (w WebFetchTool) CheckDomains() error {
	for _, l := range []struct {
		name    string
		entries []string
	}{{"allowed_domains", w.AllowedDomains}, {"blocked_domains", w.BlockedDomains}} {
		for i, d := range l.entries {
			if _, err := DomainHost(d); err != nil {
				return fmt.Errorf("%s.%d: %w", l.name, i, err)
			}
		}
	}
	return nil
}

// DomainHost returns the host an entry of allowed_domains or
// blocked_domains covers (with its subdomains, when it is a name), as
// egress.NormalizeHost writes hosts: lower-case, no trailing dot, an
// address in its canonical form, a name in another script in its punycode
// form, as the fetch resolves it. An entry that names a port, a wildcard,
// or no host at all covers nothing, and the error says what to write.
func DomainHost(entry string) (string, error) {
	d, port := SplitDomain(entry)
	if port != "" {
		return "", fmt.Errorf("%q names a port, but a domain list matches a host on every port: write the host alone (%q)", entry, d)
	}
	if rest, ok := strings.CutPrefix(d, "*."); ok {
		return "", fmt.Errorf("%q is a wildcard, but a domain covers its subdomains already: write %q", entry, rest)
	}
	if a, err := idna.Lookup.ToASCII(d); err == nil {
		d = a
	}
	host, ok := egress.NormalizeHost(d)
	if !ok {
		return "", fmt.Errorf("%q names no host: write a domain such as \"example.com\" (it covers its subdomains) or an IP address", entry)
	}
	return host, nil
}

// SplitDomain returns the host an entry of allowed_domains or
// blocked_domains names, and the port written after it ("" for none).
// An entry may be written as a URL: its scheme and path are dropped. An
// IPv6 address may be bracketed, and must be to carry a port.
func SplitDomain(entry string) (host, port string) {
	d := strings.TrimSpace(entry)
	if i := strings.Index(d, "://"); i >= 0 {
		d = d[i+3:]
	}
	d, _, _ = strings.Cut(d, "/")
	if rest, ok := strings.CutPrefix(d, "["); ok {
		if host, after, ok := strings.Cut(rest, "]"); ok && (after == "" || after[0] == ':') {
			return host, strings.TrimPrefix(after, ":")
		}
		return rest, ""
	}
	if strings.Count(d, ":") == 1 { // a name or an IPv4 address and a port; a bare IPv6 address has more
		host, port, _ = strings.Cut(d, ":")
		return host, port
	}
	return d, ""
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

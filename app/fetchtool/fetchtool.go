// Package fetchtool runs the web_fetch server tool of the Messages API: it
// fetches a URL on behalf of the turn's org through the egress proxy's
// decisions and ledger (the org's egress switch and allowlist, the
// operator's ceiling), honours the tool's allowed_domains and
// blocked_domains, and answers the page's text (HTML reduced to text) or
// a PDF as a document, cut to max_content_tokens.
package fetchtool

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"mime"
	"net/netip"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/egress"
	"threadbox/domain/org"
)

// Fetcher fetches a URL through the egress policy and ledger
// (infra/egressproxy.Proxy).
type Fetcher interface {
	Fetch(ctx context.Context, scope egress.Scope, pol egress.Policy, rawURL string, limit int64, allow func(host string) bool) (*egress.Fetched, error)
}

// Policies returns an org's policy in force (app/admin.Service).
type Policies interface {
	OrgPolicy(ctx context.Context, orgID string) (org.Policy, error)
}

// MaxBytes bounds what one fetch reads.
const MaxBytes = 10 << 20

// bytesPerToken is the estimate max_content_tokens is applied with.
const bytesPerToken = 4

// Executor runs web_fetch calls (a messages.ToolExecutor).
type Executor struct {
	fetch    Fetcher
	policies Policies
	log      *slog.Logger
	now      func() time.Time
}

// New returns an executor fetching with f under the policies of p.
func New(f Fetcher, p Policies, log *slog.Logger) *Executor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Executor{fetch: f, policies: p, log: log, now: time.Now}
}

// Execute runs one web_fetch call. A fetch that fails is the call's error
// result, never an error of the turn.
func (e *Executor) Execute(ctx context.Context, call messages.ToolCall) (*wire.ToolResult, error) {
	var in struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(call.Input, &in) != nil || in.URL == "" {
		return wire.WebFetchError(wire.FetchInvalidInput), nil
	}
	var opts wire.WebFetchTool
	if call.WebFetch != nil {
		opts = *call.WebFetch
	}
	allow := func(host string) bool { return Allowed(opts, host) }
	p, err := e.policies.OrgPolicy(ctx, call.OrgID)
	if err != nil {
		e.log.Warn("web_fetch: policy", "org", call.OrgID, "err", err)
		return wire.WebFetchError(wire.FetchUnavailable), nil
	}
	scope := egress.Scope{OrgID: call.OrgID, UserID: call.UserID, ContainerID: call.ContainerID}
	f, err := e.fetch.Fetch(ctx, scope, p.EgressPolicy(), in.URL, MaxBytes, allow)
	var refused *egress.Refused
	switch {
	case errors.As(err, &refused):
		return wire.WebFetchError(wire.FetchURLNotAllowed), nil
	case err != nil:
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e.log.Info("web_fetch: fetch failed", "url", in.URL, "err", err)
		return wire.WebFetchError(wire.FetchURLNotAccessible), nil
	case f.Status == 429:
		return wire.WebFetchError(wire.FetchTooManyRequests), nil
	case f.Status >= 400:
		return wire.WebFetchError(wire.FetchURLNotAccessible), nil
	}
	doc := wire.FetchedDocument{URL: in.URL, RetrievedAt: e.now().UTC().Format(time.RFC3339), Title: f.URL, MediaType: "text/plain"}
	if opts.Citations != nil {
		doc.Citations = opts.Citations.Enabled
	}
	mt, _, _ := mime.ParseMediaType(f.ContentType)
	switch {
	case mt == "application/pdf":
		if f.Truncated {
			return wire.WebFetchError(wire.FetchContentTooLarge), nil
		}
		doc.MediaType, doc.Data = mt, base64.StdEncoding.EncodeToString(f.Body)
		return wire.WebFetchResult(doc), nil
	case mt == "text/html" || mt == "application/xhtml+xml":
		title, text := htmlText(f.Body)
		if title != "" {
			doc.Title = title
		}
		doc.Data = text
	case isText(mt):
		doc.Data = strings.ToValidUTF8(string(f.Body), "\uFFFD")
	default:
		return wire.WebFetchError(wire.FetchUnsupportedContent), nil
	}
	if opts.MaxContentTokens > 0 {
		doc.Data = strings.TrimRightFunc(cut(doc.Data, opts.MaxContentTokens*bytesPerToken), unicode.IsSpace)
	}
	return wire.WebFetchResult(doc), nil
}

// Allowed reports whether the tool's domain filters let host be fetched:
// a domain covers itself and its subdomains; blocked_domains refuses,
// allowed_domains (when given) must cover it. host is as
// egress.NormalizeHost writes it, which is how the Fetcher passes it; a
// domain of the lists is compared in that form too, so neither case, a
// trailing dot nor an address's spelling gets a host past them
// (wire.DomainHost). The request's check refuses an entry that covers no
// host, such as one naming a port or a wildcard
// (wire.WebFetchTool.CheckDomains); one that comes here anyway blocks
// what its host part names, on every port, and allows nothing, so it
// never lets more through than it says.
func Allowed(opts wire.WebFetchTool, host string) bool {
	covers := func(list []string, blocking bool) bool {
		for _, entry := range list {
			d, err := wire.DomainHost(entry)
			if err != nil && blocking {
				h, _ := wire.SplitDomain(entry)
				d, err = wire.DomainHost(strings.TrimPrefix(h, "*."))
			}
			if err == nil && (host == d || isName(d) && strings.HasSuffix(host, "."+d)) {
				return true
			}
		}
		return false
	}
	if covers(opts.BlockedDomains, true) {
		return false
	}
	return len(opts.AllowedDomains) == 0 || covers(opts.AllowedDomains, false)
}

// isName reports whether host is a name rather than an address: only a
// name covers the names below it (an entry 2.3.4 is no name, and must
// not cover the address 1.2.3.4).
func isName(host string) bool {
	_, err := netip.ParseAddr(host)
	return err != nil && !isNumeric(host)
}

// isNumeric reports whether s is digits and dots only: part of an IPv4
// address, not a name (a name's last label is never all digits).
func isNumeric(s string) bool {
	return strings.Trim(s, "0123456789.") == ""
}

func isText(mt string) bool {
	switch {
	case strings.HasPrefix(mt, "text/"), mt == "application/json", mt == "application/xml", mt == "application/javascript",
		strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"), mt == "":
		return true
	}
	return false
}

// cut returns s cut to at most n bytes on a character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// htmlText returns an HTML page's title and its text: script, style and
// other invisible elements dropped, blocks on lines of their own.
func htmlText(b []byte) (title, text string) {
	z := html.NewTokenizer(bytes.NewReader(b))
	var out strings.Builder
	skip, inTitle := 0, false
	for {
		switch z.Next() {
		case html.ErrorToken:
			return strings.TrimSpace(title), tidy(out.String())
		case html.StartTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "script", "style", "noscript", "template", "svg":
				skip++
			case "title":
				inTitle = true
			case "br", "p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "section", "article", "table":
				out.WriteByte('\n')
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "script", "style", "noscript", "template", "svg":
				if skip > 0 {
					skip--
				}
			case "title":
				inTitle = false
			case "p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "section", "article", "table":
				out.WriteByte('\n')
			}
		case html.TextToken:
			t := string(z.Text())
			switch {
			case inTitle:
				title += t
			case skip == 0:
				out.WriteString(t)
			}
		}
	}
}

// tidy trims each line and collapses runs of blank lines.
func tidy(s string) string {
	var lines []string
	blank := false
	for l := range strings.SplitSeq(s, "\n") {
		l = strings.Join(strings.Fields(l), " ")
		if l == "" {
			if !blank && len(lines) > 0 {
				lines = append(lines, "")
			}
			blank = true
			continue
		}
		lines = append(lines, l)
		blank = false
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

package messages

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
)

// The source types of image and document blocks, as the Anthropic API
// defines them. A url source is fetched by threadbox (urls.go) and goes on
// as a base64 one; the others go on as checked.
const (
	SourceBase64  = "base64"
	SourceURL     = "url"
	SourceText    = "text"    // a document's plain text
	SourceContent = "content" // a document made of text and image blocks
)

// sourceTypes lists the source types each media block accepts. Anything
// else — a provider's file id, a misspelt "URL", a made-up type that
// carries a url member — is refused: an adapter could otherwise hand a
// URL to a model server that fetches it from the operator's network.
var sourceTypes = map[string][]string{
	wire.BlockImage:    {SourceBase64, SourceURL},
	wire.BlockDocument: {SourceBase64, SourceURL, SourceText, SourceContent},
}

// sourceMembers lists the members each source type has; a source with
// any other member is refused, so what goes on is what was checked.
var sourceMembers = map[string][]string{
	SourceBase64:  {"type", "media_type", "data"},
	SourceURL:     {"type", "url"},
	SourceText:    {"type", "media_type", "data"},
	SourceContent: {"type", "content"},
}

// acceptOf lists the media types of a block's base64 data, which are also
// the types a URL fetch accepts for it.
var acceptOf = map[string][]string{
	wire.BlockImage:    {"image/jpeg", "image/png", "image/gif", "image/webp"},
	wire.BlockDocument: {"application/pdf"},
}

// maxFetches bounds the URLs one request may name.
const maxFetches = 20

// media is an image or document block taken apart by checkMedia.
type media struct {
	typ    string                     // BlockImage or BlockDocument
	block  map[string]json.RawMessage // its members, source included
	source map[string]json.RawMessage // the source's members
	kind   string                     // the source's type
	url    string                     // a url source's URL
	parts  []json.RawMessage          // a content source's blocks, when an array
}

// mediaFunc is called with each image and document block, checked, and
// returns the block to send on (raw, or a replacement).
type mediaFunc func(m *media, raw json.RawMessage, where string) (json.RawMessage, error)

// eachMedia checks every image and document block of req's messages — a
// tool result's content and a content source's blocks included — and
// replaces each by what fn returns (fn nil keeps them). It is the one
// walk over media blocks: plan checks a request with it, Run sends on what
// it returns (urls.go). It returns the number of url sources found.
func eachMedia(req *wire.Request, fn mediaFunc) (int, error) {
	w := mediaWalk{fn: fn}
	for i := range req.Messages {
		for j := range req.Messages[i].Content {
			b := &req.Messages[i].Content[j]
			switch b.Type {
			case wire.BlockImage, wire.BlockDocument:
				raw, err := w.block(b.Type, b.Raw, blockPath(i, j), true)
				if err != nil {
					return w.urls, err
				}
				b.Raw = raw
			case wire.BlockToolResult:
				var parts []json.RawMessage
				if len(b.Content) == 0 || json.Unmarshal(b.Content, &parts) != nil {
					continue // a string, or nothing
				}
				out, err := w.blocks(parts, blockPath(i, j)+".content", true)
				if err != nil {
					return w.urls, err
				}
				if out != nil {
					b.Content = out
				}
			}
		}
	}
	return w.urls, nil
}

// blockPath names block j of message i in an error: built only for the
// media and tool result blocks it may be needed for, most blocks being text.
func blockPath(i, j int) string {
	return "messages." + strconv.Itoa(i) + ".content." + strconv.Itoa(j)
}

// mediaWalk is the state of one eachMedia.
type mediaWalk struct {
	fn   mediaFunc
	urls int
}

// blocks checks the media blocks among parts (a tool result's content, or
// a content source's); it returns the parts encoded anew when fn replaced
// any, else nil. Documents may hold content sources only at the top level
// (a content source holds text and image blocks).
func (w *mediaWalk) blocks(parts []json.RawMessage, where string, documents bool) (json.RawMessage, error) {
	changed := false
	for k, part := range parts {
		var head struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(part, &head) != nil || sourceTypes[head.Type] == nil {
			continue
		}
		raw, err := w.block(head.Type, part, fmt.Sprintf("%s.%d", where, k), documents)
		if err != nil {
			return nil, err
		}
		if string(raw) != string(part) {
			parts[k], changed = raw, true
		}
	}
	if !changed {
		return nil, nil
	}
	out, err := json.Marshal(parts)
	if err != nil {
		return nil, fmt.Errorf("messages: %s: %w", where, err)
	}
	return out, nil
}

// block checks one media block and returns what fn makes of it.
func (w *mediaWalk) block(typ string, raw json.RawMessage, where string, documents bool) (json.RawMessage, error) {
	m, err := checkMedia(typ, raw, where)
	if err != nil {
		return nil, err
	}
	switch m.kind {
	case SourceURL:
		if w.urls++; w.urls > maxFetches {
			return nil, fault.Errorf(fault.Invalid, "%s.source: a request may name at most %d URLs", where, maxFetches)
		}
	case SourceContent:
		if !documents {
			return nil, fault.Errorf(fault.Invalid, "%s.source.type: a document's content holds text and image blocks only", where)
		}
		for k, part := range m.parts {
			var head struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(part, &head) != nil || head.Type != wire.BlockText && head.Type != wire.BlockImage {
				return nil, fault.Errorf(fault.Invalid, "%s.source.content.%d: a content source holds text and image blocks", where, k)
			}
		}
		out, err := w.blocks(m.parts, where+".source.content", false)
		if err != nil {
			return nil, err
		}
		if out != nil {
			m.source["content"] = out
			if raw, err = m.encode(where); err != nil {
				return nil, err
			}
		}
	}
	if w.fn == nil {
		return raw, nil
	}
	return w.fn(m, raw, where)
}

// checkMedia takes an image or document block apart and checks its source
// against the rule above. Member names are matched exactly; a member that
// differs from "type" or "source" only in case is refused, as a model
// server's decoder might take it for the other.
func checkMedia(typ string, raw json.RawMessage, where string) (*media, error) {
	m := &media{typ: typ}
	if err := json.Unmarshal(raw, &m.block); err != nil || m.block == nil {
		return nil, fault.Errorf(fault.Invalid, "%s: a block of type %q must be an object", where, typ)
	}
	for k := range m.block {
		if k != "type" && k != "source" && (strings.EqualFold(k, "type") || strings.EqualFold(k, "source")) {
			return nil, fault.Errorf(fault.Invalid, "%s.%s: member names are case-sensitive", where, k)
		}
	}
	src, ok := m.block["source"]
	if !ok {
		return nil, fault.Errorf(fault.Invalid, "%s.source: required", where)
	}
	if json.Unmarshal(src, &m.source) != nil || m.source == nil {
		return nil, fault.Errorf(fault.Invalid, "%s.source: must be an object", where)
	}
	if json.Unmarshal(m.source["type"], &m.kind) != nil || !slices.Contains(sourceTypes[typ], m.kind) {
		return nil, fault.Errorf(fault.Invalid, "%s.source.type: %q is not a source type this server accepts for %s blocks: use %s",
			where, m.kind, typ, quoted(sourceTypes[typ]))
	}
	for k := range m.source {
		if !slices.Contains(sourceMembers[m.kind], k) {
			return nil, fault.Errorf(fault.Invalid, "%s.source.%s: not a member of a %q source", where, k, m.kind)
		}
	}
	str := func(name string) (string, error) {
		var s string
		if json.Unmarshal(m.source[name], &s) != nil || s == "" {
			return "", fault.Errorf(fault.Invalid, "%s.source.%s: required, a string", where, name)
		}
		return s, nil
	}
	switch m.kind {
	case SourceBase64:
		mt, err := str("media_type")
		if err != nil {
			return nil, err
		}
		if !slices.Contains(acceptOf[typ], mt) {
			return nil, fault.Errorf(fault.Invalid, "%s.source.media_type: %q is not one of %s", where, mt, quoted(acceptOf[typ]))
		}
		if _, err := str("data"); err != nil {
			return nil, err
		}
	case SourceURL:
		u, err := str("url")
		if err != nil {
			return nil, err
		}
		m.url = u
	case SourceText:
		mt, err := str("media_type")
		if err != nil {
			return nil, err
		}
		if mt != "text/plain" {
			return nil, fault.Errorf(fault.Invalid, "%s.source.media_type: a text source is \"text/plain\"", where)
		}
		if json.Unmarshal(m.source["data"], new(string)) != nil {
			return nil, fault.Errorf(fault.Invalid, "%s.source.data: required, a string", where)
		}
	case SourceContent:
		c := m.source["content"]
		if json.Unmarshal(c, new(string)) == nil {
			break
		}
		if json.Unmarshal(c, &m.parts) != nil || m.parts == nil {
			return nil, fault.Errorf(fault.Invalid, "%s.source.content: required, a string or an array of text and image blocks", where)
		}
	}
	return m, nil
}

// encode writes the block anew from its checked members: each member once,
// so no duplicate a model server might read otherwise reaches it.
func (m *media) encode(where string) (json.RawMessage, error) {
	src, err := json.Marshal(m.source)
	if err != nil {
		return nil, fmt.Errorf("messages: %s.source: %w", where, err)
	}
	m.block["source"] = src
	out, err := json.Marshal(m.block)
	if err != nil {
		return nil, fmt.Errorf("messages: %s: %w", where, err)
	}
	return out, nil
}

// quoted lists names as "a", "b" or "c".
func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

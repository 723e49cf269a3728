package messages

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"threadbox/domain/fault"
)

// URLFetcher fetches the images and documents a request names by URL
// (infra/webfetch): only from public addresses, size-capped, of the types
// asked for. Errors that are the URL's fault are fault.Invalid.
type URLFetcher interface {
	Fetch(ctx context.Context, url string, accept []string) (mediaType string, data []byte, err error)
}

// maxFetches bounds the URLs one request may name.
const maxFetches = 20

// acceptOf lists the media types fetched for a block type.
var acceptOf = map[string][]string{
	BlockImage:    {"image/jpeg", "image/png", "image/gif", "image/webp"},
	BlockDocument: {"application/pdf"},
}

// inlineURLs replaces the URL sources of the image and document blocks of
// req's messages (tool results' content included) with base64 sources
// fetched by f, so that no model server ever fetches a user's URL (an
// OpenAI-compatible server on the operator's network, or an upstream
// reaching addresses the user cannot). With f nil such blocks are refused.
func inlineURLs(ctx context.Context, req *Request, f URLFetcher) error {
	n := 0
	for i := range req.Messages {
		for j := range req.Messages[i].Content {
			b := &req.Messages[i].Content[j]
			where := fmt.Sprintf("messages.%d.content.%d", i, j)
			switch b.Type {
			case BlockImage, BlockDocument:
				raw, err := inlineBlock(ctx, b.Type, b.Raw, f, &n, where)
				if err != nil {
					return err
				}
				b.Raw = raw
			case BlockToolResult:
				var parts []json.RawMessage
				if len(b.Content) == 0 || json.Unmarshal(b.Content, &parts) != nil {
					continue // a string, or nothing
				}
				changed := false
				for k, part := range parts {
					var head struct {
						Type string `json:"type"`
					}
					if json.Unmarshal(part, &head) != nil || acceptOf[head.Type] == nil {
						continue
					}
					raw, err := inlineBlock(ctx, head.Type, part, f, &n, fmt.Sprintf("%s.content.%d", where, k))
					if err != nil {
						return err
					}
					changed = changed || string(raw) != string(part)
					parts[k] = raw
				}
				if changed {
					c, err := json.Marshal(parts)
					if err != nil {
						return fmt.Errorf("messages: %s: %w", where, err)
					}
					b.Content = c
				}
			}
		}
	}
	return nil
}

// inlineBlock returns the block raw with its URL source replaced by the
// fetched data, or raw itself when its source is not a URL.
func inlineBlock(ctx context.Context, typ string, raw json.RawMessage, f URLFetcher, n *int, where string) (json.RawMessage, error) {
	var block map[string]json.RawMessage
	if json.Unmarshal(raw, &block) != nil {
		return raw, nil
	}
	var src struct {
		Type string `json:"type"`
		URL  string `json:"url"`
	}
	if json.Unmarshal(block["source"], &src) != nil || src.Type != "url" {
		return raw, nil
	}
	if f == nil {
		return nil, fault.Errorf(fault.Invalid, "%s.source: this server does not fetch URLs; send the %s as base64 data", where, typ)
	}
	if *n++; *n > maxFetches {
		return nil, fault.Errorf(fault.Invalid, "%s.source: a request may name at most %d URLs", where, maxFetches)
	}
	mt, data, err := f.Fetch(ctx, src.URL, acceptOf[typ])
	if fault.KindOf(err) == fault.Invalid {
		return nil, fault.Errorf(fault.Invalid, "%s.source.url: %s", where, fault.MessageOf(err))
	} else if err != nil {
		return nil, fmt.Errorf("messages: %s.source.url: %w", where, err)
	}
	s, err := json.Marshal(struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	}{"base64", mt, base64.StdEncoding.EncodeToString(data)})
	if err != nil {
		return nil, fmt.Errorf("messages: %s: %w", where, err)
	}
	block["source"] = s
	out, err := json.Marshal(block)
	if err != nil {
		return nil, fmt.Errorf("messages: %s: %w", where, err)
	}
	return out, nil
}

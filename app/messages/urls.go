package messages

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
)

// URLFetcher fetches the images and documents a request names by URL
// (infra/webfetch): only from public addresses, size-capped, of the types
// asked for. Errors that are the URL's fault are fault.Invalid.
type URLFetcher interface {
	Fetch(ctx context.Context, url string, accept []string) (mediaType string, data []byte, err error)
}

// sandboxURLs is the URLFetcher of a sandbox token's requests: it fetches
// nothing. Code in a sandbox reaches the network only through the egress
// proxy, under its org's egress policy; a URL fetched here on its behalf
// would reach any public address, the policy notwithstanding.
type sandboxURLs struct{}

func (sandboxURLs) Fetch(context.Context, string, []string) (string, []byte, error) {
	return "", nil, fault.New(fault.Forbidden, "a request made from inside a sandbox cannot name images or documents by URL: "+
		"fetch the file in the sandbox (its egress policy applies) and send it as base64 data")
}

// inlineSources rewrites the image and document blocks of req's messages
// (a tool result's content and a document's content source included) as
// they go on to the model: a url source becomes a base64 source fetched by
// f, so that no model server ever fetches a user's URL (an
// OpenAI-compatible server on the operator's network, or an upstream
// reaching addresses the user cannot), and every block is written anew
// from its checked members (sources.go). With f nil url sources are
// refused.
func inlineSources(ctx context.Context, req *wire.Request, f URLFetcher) error {
	_, err := eachMedia(req, func(m *media, _ json.RawMessage, where string) (json.RawMessage, error) {
		if m.kind == SourceURL {
			if err := fetchSource(ctx, m, f, where); err != nil {
				return nil, err
			}
		}
		return m.encode(where)
	})
	return err
}

// fetchSource replaces m's url source by a base64 source of what f
// fetched.
func fetchSource(ctx context.Context, m *media, f URLFetcher, where string) error {
	if f == nil {
		return fault.Errorf(fault.Invalid, "%s.source: this server does not fetch URLs; send the %s as base64 data", where, m.typ)
	}
	mt, data, err := f.Fetch(ctx, m.url, acceptOf[m.typ])
	if fault.KindOf(err) == fault.Invalid {
		return fault.Errorf(fault.Invalid, "%s.source.url: %s", where, fault.MessageOf(err))
	} else if err != nil {
		return fmt.Errorf("messages: %s.source.url: %w", where, err)
	}
	src := map[string]json.RawMessage{}
	for k, v := range map[string]string{"type": SourceBase64, "media_type": mt, "data": base64.StdEncoding.EncodeToString(data)} {
		if src[k], err = json.Marshal(v); err != nil {
			return fmt.Errorf("messages: %s: %w", where, err)
		}
	}
	m.source, m.kind, m.url = src, SourceBase64, ""
	return nil
}

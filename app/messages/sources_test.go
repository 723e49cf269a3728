package messages

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
)

// fetcher answers every URL with the same bytes, counting the fetches.
type fetcher struct{ urls []string }

func (f *fetcher) Fetch(_ context.Context, url string, accept []string) (string, []byte, error) {
	f.urls = append(f.urls, url)
	return accept[0], []byte("img"), nil
}

// TestSources: the one rule for image and document sources, as plan checks
// it and as Run sends blocks on: url sources are fetched and sent as
// base64, wherever the block is; everything sent is written anew from the
// checked members; every other source is refused, naming the block.
func TestSources(t *testing.T) {
	const b64 = `{"type":"base64","media_type":"image/png","data":"aW1n"}`
	user := func(blocks string) string {
		return `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[` + blocks + `]}]}`
	}
	tests := []struct {
		name    string
		req     string
		err     string   // part of the refusal, or ""
		sent    []string // parts of the messages sent on
		notSent []string
		fetched int
	}{
		{"base64 image", user(`{"type":"image","source":` + b64 + `}`), "", []string{`"data":"aW1n"`}, nil, 0},
		{"url image fetched", user(`{"type":"image","source":{"type":"url","url":"https://img.test/a.png"}}`), "",
			[]string{`"type":"base64"`, `"media_type":"image/jpeg"`}, []string{"img.test"}, 1},
		{"url in a tool result fetched", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"url","url":"https://img.test/b.png"}}]}]}]}`, "",
			[]string{`"type":"base64"`}, []string{"img.test"}, 1},
		{"url in a document's content fetched", user(`{"type":"document","source":{"type":"content","content":[{"type":"text","text":"t"},{"type":"image","source":{"type":"url","url":"https://img.test/c.png"}}]}}`), "",
			[]string{`"type":"base64"`, `"text":"t"`}, []string{"img.test"}, 1},
		{"pdf by url", user(`{"type":"document","source":{"type":"url","url":"https://doc.test/a.pdf"},"title":"a"}`), "",
			[]string{`"media_type":"application/pdf"`, `"title":"a"`}, []string{"doc.test"}, 1},
		{"text document", user(`{"type":"document","source":{"type":"text","media_type":"text/plain","data":""}}`), "", []string{`"type":"text"`}, nil, 0},
		{"duplicate members sent once", user(`{"type":"image","source":{"type":"base64","media_type":"image/gif","data":"eA==","media_type":"image/png"}}`), "",
			[]string{`"media_type":"image/png"`}, []string{"image/gif"}, 0},
		{"unknown type", user(`{"type":"image","source":{"type":"link","url":"http://169.254.169.254/"}}`), `messages.0.content.0.source.type: "link" is not a source type`, nil, nil, 0},
		{"file source", user(`{"type":"document","source":{"type":"file","file_id":"file_1"}}`), `"file" is not a source type this server accepts for document blocks: use "base64", "url", "text" or "content"`, nil, nil, 0},
		{"text source for an image", user(`{"type":"image","source":{"type":"text","media_type":"text/plain","data":"x"}}`), `use "base64" or "url"`, nil, nil, 0},
		{"source missing", user(`{"type":"image"}`), "messages.0.content.0.source: required", nil, nil, 0},
		{"source not an object", user(`{"type":"image","source":"http://169.254.169.254/"}`), "source: must be an object", nil, nil, 0},
		{"member in another case", user(`{"type":"image","source":` + b64 + `,"SOURCE":{"type":"url","url":"http://169.254.169.254/"}}`), "messages.0.content.0.SOURCE: member names are case-sensitive", nil, nil, 0},
		{"unknown member", user(`{"type":"image","source":{"type":"url","url":"https://img.test/a.png","URL":"http://169.254.169.254/"}}`), `source.URL: not a member of a "url" source`, nil, nil, 0},
		{"empty url", user(`{"type":"image","source":{"type":"url","url":""}}`), "source.url: required", nil, nil, 0},
		{"base64 without data", user(`{"type":"image","source":{"type":"base64","media_type":"image/png"}}`), "source.data: required", nil, nil, 0},
		{"base64 of another type", user(`{"type":"document","source":{"type":"base64","media_type":"text/html","data":"eA=="}}`), `source.media_type: "text/html" is not one of "application/pdf"`, nil, nil, 0},
		{"a document in a document's content", user(`{"type":"document","source":{"type":"content","content":[{"type":"document","source":{"type":"url","url":"https://doc.test/a.pdf"}}]}}`), "source.content.0: a content source holds text and image blocks", nil, nil, 0},
		{"content neither string nor blocks", user(`{"type":"document","source":{"type":"content","content":5}}`), "source.content: required", nil, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req wire.Request
			if err := json.Unmarshal([]byte(tc.req), &req); err != nil {
				t.Fatal(err)
			}
			_, perr := plan(&req, nil)
			f := &fetcher{}
			ierr := inlineSources(context.Background(), &req, f)
			if tc.err != "" {
				for _, err := range []error{perr, ierr} {
					if fault.KindOf(err) != fault.Invalid || !strings.Contains(fault.MessageOf(err), tc.err) {
						t.Fatalf("got %v, want an invalid request saying %q", err, tc.err)
					}
				}
				if len(f.urls) != 0 {
					t.Fatalf("fetched %v for a refused request", f.urls)
				}
				return
			}
			if perr != nil || ierr != nil {
				t.Fatalf("plan %v, inline %v", perr, ierr)
			}
			out, err := json.Marshal(req.Messages)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.sent {
				if !strings.Contains(string(out), s) {
					t.Errorf("sent %s, want %s in it", out, s)
				}
			}
			for _, s := range tc.notSent {
				if strings.Contains(string(out), s) {
					t.Errorf("sent %s, with %s in it", out, s)
				}
			}
			if len(f.urls) != tc.fetched {
				t.Errorf("fetched %v, want %d", f.urls, tc.fetched)
			}
		})
	}
}

// TestSourcesURLLimit: a request naming more URLs than a request may is
// refused before anything is fetched.
func TestSourcesURLLimit(t *testing.T) {
	blocks := make([]string, maxFetches+1)
	for i := range blocks {
		blocks[i] = `{"type":"image","source":{"type":"url","url":"https://img.test/a.png"}}`
	}
	var req wire.Request
	if err := json.Unmarshal([]byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[`+strings.Join(blocks, ",")+`]}]}`), &req); err != nil {
		t.Fatal(err)
	}
	if _, err := plan(&req, nil); fault.KindOf(err) != fault.Invalid || !strings.Contains(err.Error(), "at most 20 URLs") {
		t.Fatalf("plan: %v", err)
	}
}

package c2pa

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// endpoint is an HTTP service the signer posts to: a signing hook or a
// timestamp authority.
type endpoint struct {
	url    string
	client *http.Client
}

// newEndpoint returns the endpoint at url; a nil client is one with a
// 10-second timeout.
func newEndpoint(url string, client *http.Client) endpoint {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	return endpoint{url: url, client: client}
}

// post sends body as contentType with the extra header fields (name,
// value pairs) and returns the answer of a 200, at most limit bytes; what
// names the endpoint in errors.
func (e endpoint) post(ctx context.Context, what, contentType string, body []byte, limit int64, header ...string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("c2pa: %s: %w", what, err)
	}
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("c2pa: %s: %w", what, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("c2pa: %s: %w", what, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("c2pa: %s answered %s", what, resp.Status)
	}
	if int64(len(answer)) > limit {
		return nil, fmt.Errorf("c2pa: %s: the answer is larger than %d bytes", what, limit)
	}
	return answer, nil
}

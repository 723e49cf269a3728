package anthropic

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"threadbox/app/messages"
	"threadbox/infra/llm/fakeupstream"
	"threadbox/infra/llm/upstream"
)

// BenchmarkStep compares a raw HTTP call to the fake upstream with the
// adapter's Step and StreamStep over the same loopback connection pool: the
// difference is the adapter's (and the SDK's) added latency; the "via the
// SDK" rows send through the SDK's request configuration instead of the
// sender.
func BenchmarkStep(b *testing.B) {
	up := fakeupstream.New()
	defer up.Close()
	req := stepRequest()
	m := New(Config{BaseURL: up.URL(), Model: "m"})
	body, err := m.body(req, false)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("direct", func(b *testing.B) {
		hc := &http.Client{Transport: upstream.NewTransport()}
		for b.Loop() {
			res, err := hc.Post(up.URL()+"/v1/messages", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	})
	b.Run("step", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Step(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.StreamStep(context.Background(), req, func(messages.StepEvent) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same through the SDK's request configuration (no sender).
	viaSDK := New(Config{BaseURL: up.URL(), Model: "m"})
	viaSDK.send = nil
	b.Run("step via the SDK", func(b *testing.B) {
		for b.Loop() {
			if _, err := viaSDK.Step(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream via the SDK", func(b *testing.B) {
		for b.Loop() {
			if _, err := viaSDK.StreamStep(context.Background(), req, func(messages.StepEvent) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

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

// BenchmarkMarshalTools encodes four tool definitions of about 1 KB each,
// as the code-execution tools are, marked canonical (copied as they are)
// or not (each scanned first).
func BenchmarkMarshalTools(b *testing.B) {
	var tools []messages.ToolDefinition
	for i := range 4 {
		schema := `{"type":"object","properties":{`
		for j := range 12 {
			if j > 0 {
				schema += ","
			}
			schema += `"field_` + string(rune('a'+j)) + `":{"type":"string","description":"What the command does, in a sentence or two of plain words."}`
		}
		schema += `},"required":["field_a"]}`
		raw, err := messages.ToolDefinition{Name: "tool_" + string(rune('a'+i)), Description: "A tool.", InputSchema: []byte(schema)}.MarshalJSON()
		if err != nil {
			b.Fatal(err)
		}
		tools = append(tools, messages.ToolDefinition{Raw: raw})
	}
	for _, canonical := range []bool{false, true} {
		for i := range tools {
			tools[i].Canonical = canonical
		}
		name := "scanned"
		if canonical {
			name = "canonical"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := marshalTools(tools); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

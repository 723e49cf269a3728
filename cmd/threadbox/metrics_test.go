package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	msgwire "threadbox/app/messages/wire"
)

// TestMetrics: /metrics needs the scrape token, parses with Prometheus'
// own text parser, and its counters move after a chat turn with code.
func TestMetrics(t *testing.T) {
	s, fake := modelServer(t, "", "anthropic", map[string]string{"METRICS_TOKEN": "scrape-secret"})
	f := newWSFixture(t, s)
	if r := s.do("GET", "/metrics", "", nil); r.status != 401 || r.errorType(t) != "authentication_error" {
		t.Fatalf("metrics without the token: %d %s", r.status, r.body)
	}
	if r := s.do("GET", "/metrics", "wrong", nil); r.status != 401 {
		t.Fatalf("metrics with a wrong token: %d", r.status)
	}
	fake.Push(steps(call(msgwire.SubToolTextEditor, map[string]any{"command": "create", "path": "/mnt/user-data/outputs/m.txt", "file_text": "x"})), textStep("done"))
	if r := s.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, map[string]any{"content": "go", "pgpt": map[string]any{"tools": []any{"code_execution"}}}); r.status != 200 {
		t.Fatalf("turn: %d %s", r.status, r.body)
	}
	r := s.do("GET", "/metrics", "scrape-secret", nil)
	if r.status != 200 {
		t.Fatalf("metrics: %d %s", r.status, r.body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("the metrics do not parse: %v", err)
	}
	value := func(name string, labels map[string]string) float64 {
		fam := families[name]
		if fam == nil {
			return -1
		}
		var sum float64
	next:
		for _, m := range fam.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
		return sum
	}
	checks := []struct {
		name   string
		labels map[string]string
		least  float64
	}{
		{"threadbox_http_requests_total", map[string]string{"route": "/api/v1/app/thread/:id/messages", "method": "POST", "status": "200"}, 1},
		{"threadbox_http_request_duration_seconds", map[string]string{"route": "/api/v1/app/thread/:id/messages"}, 1},
		{"threadbox_model_calls_total", map[string]string{"provider": "anthropic", "outcome": "ok"}, 2},
		{"threadbox_tool_calls_total", map[string]string{"tool": msgwire.SubToolTextEditor, "outcome": "ok"}, 1},
		{"threadbox_sandboxes_running", map[string]string{"backend": "local"}, 0},
		{"threadbox_http_response_bytes_total", map[string]string{"route": "/api/v1/app/thread/:id/messages"}, 100},
		{"go_goroutines", nil, 1},
		{"process_open_fds", nil, 1},
	}
	for _, c := range checks {
		if v := value(c.name, c.labels); v < c.least {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, v, c.least)
		}
	}
	// No id ever becomes a label value.
	if strings.Contains(string(r.body), f.tid) || strings.Contains(string(r.body), "usr_") {
		t.Error("an id in the metrics' labels")
	}
}

// TestGrafanaDashboard: every metric the sample dashboard (docs/) plots is
// one threadbox exports, so the dashboard cannot drift from the code.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "grafana-threadbox.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil || len(dash.Panels) == 0 {
		t.Fatalf("dashboard: %v", err)
	}
	// threadbox's own metrics are named in infra/metrics; the Go runtime
	// and process ones are in every scrape.
	src, err := os.ReadFile(filepath.Join("..", "..", "infra", "metrics", "metrics.go"))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", map[string]string{"METRICS_TOKEN": "t"})
	body := string(s.do("GET", "/metrics", "t", nil).body) + string(src)
	name := regexp.MustCompile(`\b(threadbox_[a-z_]+|process_[a-z_]+|go_[a-z_]+)`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
				if !strings.Contains(body, "# TYPE "+base+" ") && !strings.Contains(body, `Name: "`+base+`"`) {
					t.Errorf("panel %q plots %s, which threadbox does not export", p.Title, m)
				}
			}
		}
	}
}

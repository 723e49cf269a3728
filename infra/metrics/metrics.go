// Package metrics exports threadbox's Prometheus metrics with the official
// client library: HTTP requests by route, model calls by provider, tool
// calls by tool, sandbox boots and the sandboxes running per backend,
// sweeper actions, and the Go runtime and process. Labels take only
// bounded values (route patterns, names, outcomes), never ids.
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"threadbox/app/containers"
	"threadbox/app/messages"
	"threadbox/app/messages/wire"
)

// Registry holds threadbox's metrics.
type Registry struct {
	reg *prometheus.Registry

	requests     *prometheus.CounterVec
	requestTime  *prometheus.HistogramVec
	bytesIn      *prometheus.CounterVec
	bytesOut     *prometheus.CounterVec
	modelCalls   *prometheus.CounterVec
	modelTime    *prometheus.HistogramVec
	modelTokens  *prometheus.CounterVec
	toolCalls    *prometheus.CounterVec
	toolTime     *prometheus.HistogramVec
	boots        *prometheus.CounterVec
	sweepActions *prometheus.CounterVec
	egressConns  *prometheus.CounterVec
	egressBytes  *prometheus.CounterVec
}

// New returns a registry with every metric and the Go runtime and process
// collectors.
func New() *Registry {
	r := &Registry{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { r.reg.MustRegister(c) }
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "threadbox_http_requests_total", Help: "HTTP requests by route pattern, method and status."}, []string{"route", "method", "status"})
	r.requestTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "threadbox_http_request_duration_seconds", Help: "HTTP request latency by route pattern and method.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"route", "method"})
	r.bytesIn = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "threadbox_http_request_bytes_total", Help: "Request body bytes (uploads among them) by route pattern, as declared by Content-Length."}, []string{"route"})
	r.bytesOut = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "threadbox_http_response_bytes_total", Help: "Response body bytes (downloads among them) by route pattern, as declared by Content-Length."}, []string{"route"})
	r.modelCalls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "threadbox_model_calls_total", Help: "Model steps by provider and outcome (ok, error)."}, []string{"provider", "outcome"})
	r.modelTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "threadbox_model_call_duration_seconds", Help: "Model step latency by provider.", Buckets: prometheus.ExponentialBuckets(0.01, 3, 9)}, []string{"provider"})
	r.modelTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "threadbox_model_tokens_total", Help: "Tokens the model reported, by provider and direction (input, output)."}, []string{"provider", "direction"})
	r.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "threadbox_tool_calls_total", Help: "Server tool calls by tool and outcome (ok, error)."}, []string{"tool", "outcome"})
	r.toolTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "threadbox_tool_call_duration_seconds", Help: "Server tool call duration by tool.", Buckets: prometheus.ExponentialBuckets(0.005, 3, 10)}, []string{"tool"})
	r.boots = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "threadbox_sandbox_starts_total", Help: "Sandboxes this process started holding, by how (boot, adopt)."}, []string{"how"})
	r.sweepActions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "threadbox_sweeper_actions_total", Help: "What the sweeper did, by action (stopped, expired, adopted, dropped, cleared, released)."}, []string{"action"})
	r.egressConns = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "threadbox_egress_connections_total", Help: "Connections through the egress proxy by verdict (allowed, refused) and reason (allowlist, egress-off, no-match, operator-deny, private-address, no-address, sni-mismatch, connection-limit, bad-request, no-sandbox)."}, []string{"verdict", "reason"})
	r.egressBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "threadbox_egress_bytes_total", Help: "Bytes through the egress proxy by direction (up: from sandboxes, down: to them)."}, []string{"direction"})
	for _, c := range []prometheus.Collector{r.requests, r.requestTime, r.bytesIn, r.bytesOut, r.modelCalls, r.modelTime, r.modelTokens, r.toolCalls, r.toolTime, r.boots, r.sweepActions, r.egressConns, r.egressBytes} {
		f(c)
	}
	return r
}

// Handler serves the metrics in the Prometheus text format.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{})
}

// ObserveRequest records one HTTP request (web's request observer): in and
// out are the body bytes its headers declared (negative when unknown).
func (r *Registry) ObserveRequest(route, method string, status int, d time.Duration, in, out int64) {
	r.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	r.requestTime.WithLabelValues(route, method).Observe(d.Seconds())
	if in > 0 {
		r.bytesIn.WithLabelValues(route).Add(float64(in))
	}
	if out > 0 {
		r.bytesOut.WithLabelValues(route).Add(float64(out))
	}
}

// Sandboxes reports the sandboxes a process holds per backend, read at
// each scrape (app/containers.Service).
type Sandboxes interface {
	RunningByBackend() map[string]int
}

// WatchSandboxes exports the sandboxes owner holds, per backend, as the
// gauge threadbox_sandboxes_running.
func (r *Registry) WatchSandboxes(owner Sandboxes, backends []string) {
	for _, b := range backends {
		r.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "threadbox_sandboxes_running", Help: "Sandboxes this process holds, by backend.", ConstLabels: prometheus.Labels{"backend": b},
		}, func() float64 { return float64(owner.RunningByBackend()[b]) }))
	}
}

// SandboxStarted counts a sandbox the owner booted or adopted (the
// owner's containers.Deps.OnStart).
func (r *Registry) SandboxStarted(adopted bool) {
	how := "boot"
	if adopted {
		how = "adopt"
	}
	r.boots.WithLabelValues(how).Inc()
}

// Swept counts what one of the owner's sweeps did (its
// containers.Deps.OnSweep).
func (r *Registry) Swept(rep containers.SweepReport) {
	for action, ids := range map[string][]string{"stopped": rep.Stopped, "expired": rep.Expired, "adopted": rep.Adopted,
		"dropped": rep.Dropped, "cleared": rep.Cleared, "released": rep.Released} {
		if len(ids) > 0 {
			r.sweepActions.WithLabelValues(action).Add(float64(len(ids)))
		}
	}
}

// EgressConnection counts one connection through the egress proxy
// (egressgate.Counter). The reason is the rule's kind, never a pattern, so
// the labels stay bounded.
func (r *Registry) EgressConnection(allowed bool, rule string, bytesUp, bytesDown int64) {
	verdict, reason := "refused", rule
	if allowed {
		verdict, reason = "allowed", "allowlist"
	} else if i := strings.IndexByte(rule, ':'); i > 0 {
		reason = rule[:i]
	}
	r.egressConns.WithLabelValues(verdict, reason).Inc()
	r.egressBytes.WithLabelValues("up").Add(float64(bytesUp))
	r.egressBytes.WithLabelValues("down").Add(float64(bytesDown))
}

// Model counts and times the steps of a model (messages.Model).
func (r *Registry) Model(m messages.Model, provider string) messages.Model {
	return model{m: m, provider: provider, r: r}
}

type model struct {
	m        messages.Model
	provider string
	r        *Registry
}

func (m model) Step(ctx context.Context, req messages.StepRequest) (*messages.StepResult, error) {
	start := time.Now()
	res, err := m.m.Step(ctx, req)
	m.observe(start, res, err)
	return res, err
}

func (m model) StreamStep(ctx context.Context, req messages.StepRequest, emit func(messages.StepEvent) error) (*messages.StepResult, error) {
	start := time.Now()
	res, err := m.m.StreamStep(ctx, req, emit)
	m.observe(start, res, err)
	return res, err
}

// CountTokens forwards a token count to the wrapped model where it counts.
func (m model) CountTokens(ctx context.Context, req messages.StepRequest) (int, error) {
	if c, ok := m.m.(messages.TokenCounter); ok {
		return c.CountTokens(ctx, req)
	}
	return 0, messages.ErrNoTokenCount
}

func (m model) observe(start time.Time, res *messages.StepResult, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.r.modelCalls.WithLabelValues(m.provider, outcome).Inc()
	m.r.modelTime.WithLabelValues(m.provider).Observe(time.Since(start).Seconds())
	if res != nil {
		m.r.modelTokens.WithLabelValues(m.provider, "input").Add(float64(res.Usage.InputTokens))
		m.r.modelTokens.WithLabelValues(m.provider, "output").Add(float64(res.Usage.OutputTokens))
	}
}

// Tools counts and times the server tool calls of an executor.
func (r *Registry) Tools(t messages.ToolExecutor) messages.ToolExecutor {
	return tools{t: t, r: r}
}

type tools struct {
	t messages.ToolExecutor
	r *Registry
}

// known bounds the tool label: the product's tool names, "other" else.
var known = map[string]bool{wire.SubToolBash: true, wire.SubToolTextEditor: true, messages.SubToolCodeExecution: true}

func (t tools) Execute(ctx context.Context, call messages.ToolCall) (*wire.ToolResult, error) {
	start := time.Now()
	res, err := t.t.Execute(ctx, call)
	name := call.Name
	if !known[name] && !messages.IsSandboxTool(name) {
		name = "other"
	}
	outcome := "ok"
	if err != nil || res == nil || res.IsError() {
		outcome = "error"
	}
	t.r.toolCalls.WithLabelValues(name, outcome).Inc()
	t.r.toolTime.WithLabelValues(name).Observe(time.Since(start).Seconds())
	return res, err
}

package web

import (
	"context"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
)

// Readiness probe (GET /readyz). Its answer is public: orchestrators and
// load balancers call it without a token. So it says only whether the
// server is ready; what each check found, and why one failed, goes to the
// log and to callers presenting the scrape token (METRICS_TOKEN), because
// the reasons name host paths, images and daemon addresses.
//
// The checks (a database ping, the artifact store, every sandbox backend's
// Available, which asks the Docker daemon) run at most once per readyTTL
// however many requests arrive; requests during a probe wait for that
// probe's result instead of starting their own.
const (
	readyTTL          = 2 * time.Second
	readyProbeTimeout = 15 * time.Second
)

// readyView is the detailed body of GET /readyz, for the scrape token.
type readyView struct {
	Status          string              `json:"status"`               // "ready" or "not ready"
	Database        string              `json:"database"`             // "ok" or why not
	BlobStore       string              `json:"blob_store,omitempty"` // "ok" or why not
	SandboxBackends []backendStatusView `json:"sandbox_backends"`
}

// publicReadyView is the body of GET /readyz for everyone else.
type publicReadyView struct {
	Status string `json:"status"`
}

// backendStatusView is one configured sandbox backend in readyView.
type backendStatusView struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
}

// readiness answers GET /readyz from a probe result it keeps for ttl.
type readiness struct {
	s   *Server
	ttl time.Duration
	now func() time.Time

	mu  sync.Mutex
	cur *readyProbe
}

// readyProbe is one run of the checks; done is closed when view is set.
type readyProbe struct {
	done     chan struct{}
	view     readyView
	finished bool
	at       time.Time // when it finished
}

func newReadiness(s *Server, ttl time.Duration, now func() time.Time) *readiness {
	return &readiness{s: s, ttl: ttl, now: now}
}

// serve answers 200 when the last probe found the server ready, 503
// otherwise; the body is the status alone, or the whole report for a
// caller with the scrape token.
func (r *readiness) serve(c *fiber.Ctx) error {
	v := r.report(c.UserContext())
	if v.Status != "ready" {
		c.Status(fiber.StatusServiceUnavailable)
	}
	if !r.s.hasScrapeToken(c) {
		return c.JSON(publicReadyView{Status: v.Status})
	}
	return c.JSON(v)
}

// report returns the result of the probe under way, or of the last one
// when it finished less than ttl ago, or of a new one.
func (r *readiness) report(ctx context.Context) readyView {
	r.mu.Lock()
	p := r.cur
	fresh := p != nil && (!p.finished || r.now().Sub(p.at) < r.ttl)
	if !fresh {
		p = &readyProbe{done: make(chan struct{})}
		r.cur = p
	}
	r.mu.Unlock()
	if !fresh {
		// The probe serves every request waiting for it: the request that
		// started it going away must not cut it short.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyProbeTimeout)
		v := r.s.probeReady(pctx)
		cancel()
		r.mu.Lock()
		p.view, p.finished, p.at = v, true, r.now()
		r.mu.Unlock()
		close(p.done)
	}
	<-p.done
	return p.view
}

// probeReady runs every check: the database answers and is migrated, the
// artifact store answers (when one is configured) and, when sandbox
// backends are configured, at least one of them can serve (code execution
// is core). Each failure is logged with its error.
func (s *Server) probeReady(ctx context.Context) readyView {
	v := readyView{Status: "ready", Database: "ok", SandboxBackends: []backendStatusView{}}
	if s.svc.Ready != nil {
		if err := s.svc.Ready(ctx); err != nil {
			s.log.Error("not ready: database", "err", err.Error())
			v.Status, v.Database = "not ready", "unreachable or not migrated"
		}
	}
	if s.svc.BlobsReady != nil {
		v.BlobStore = "ok"
		if err := s.svc.BlobsReady(ctx); err != nil {
			s.log.Error("not ready: artifact store", "err", err.Error())
			v.Status, v.BlobStore = "not ready", "unreachable"
		}
	}
	if s.svc.Backends != nil {
		statuses, ok := s.svc.Backends.Check(ctx)
		for _, st := range statuses {
			v.SandboxBackends = append(v.SandboxBackends, backendStatusView{Name: st.Name, Available: st.Available, Reason: st.Reason})
			if !ok && !st.Available {
				s.log.Warn("not ready: sandbox backend", "backend", st.Name, "reason", st.Reason)
			}
		}
		if !ok {
			v.Status = "not ready"
		}
	}
	return v
}

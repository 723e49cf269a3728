package containers

import (
	"context"
	"time"
)

// CPUMeter is a backend that reads, from the host's control groups, the CPU
// time a running sandbox has used since it booted: every process in it,
// the agent's and the application kernel's under gVisor too.
type CPUMeter interface {
	SandboxCPU(ctx context.Context, id string) (time.Duration, error)
}

// Meter receives a container's sandbox time since the last report: how
// long its sandbox ran (up) and the CPU time its control group used (cpu;
// zero when the backend cannot tell).
type Meter func(ctx context.Context, containerID string, up, cpu time.Duration)

// metered is where a held sandbox's metering stands.
type metered struct {
	at   time.Time     // sandbox time is reported up to here
	cpu  time.Duration // control group CPU time reported so far
	done bool          // the final report was made
}

// startMeter sets the metering baseline of a sandbox this process just
// booted (its control group's CPU time counts from zero, the boot's too)
// or adopted (from what its group has used already: the process that ran
// it reported up to its last sweep or its shutdown).
func (s *Service) startMeter(ctx context.Context, id string, l *live, adopted bool) {
	var base time.Duration
	if adopted && len(s.meters) > 0 {
		base, _ = s.cpuOf(ctx, l, id)
	}
	s.mu.Lock()
	l.meter = metered{at: s.now(), cpu: base}
	s.mu.Unlock()
}

// cpuOf reads the sandbox's control group CPU time; false when the backend
// cannot.
func (s *Service) cpuOf(ctx context.Context, l *live, id string) (time.Duration, bool) {
	m, ok := l.backend.(CPUMeter)
	if !ok {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	d, err := m.SandboxCPU(ctx, id)
	return d, err == nil
}

// report sends the sandbox time of l since its last report to the meters;
// final makes it the last (the sandbox stops). gone says the sandbox is
// already gone: its CPU time since the last report is lost.
func (s *Service) report(ctx context.Context, id string, l *live, final, gone bool) {
	if len(s.meters) == 0 || l == nil {
		return
	}
	var cpu time.Duration
	var known bool
	if !gone {
		cpu, known = s.cpuOf(ctx, l, id)
	}
	now := s.now()
	s.mu.Lock()
	if l.meter.done {
		s.mu.Unlock()
		return
	}
	up := max(now.Sub(l.meter.at), 0)
	l.meter.at = now
	var used time.Duration
	if known && cpu > l.meter.cpu {
		used = cpu - l.meter.cpu
		l.meter.cpu = cpu
	}
	l.meter.done = final
	s.mu.Unlock()
	if up == 0 && used == 0 {
		return
	}
	for _, m := range s.meters {
		m(ctx, id, up, used)
	}
}

// MeterAll reports the sandbox time of every sandbox this process holds
// since its last report. Sweeps call it; so does a server shutting down,
// whose sandboxes live on for the next process to adopt.
func (s *Service) MeterAll(ctx context.Context) {
	if len(s.meters) == 0 {
		return
	}
	s.mu.Lock()
	held := make(map[string]*live, len(s.running))
	for id, l := range s.running {
		held[id] = l
	}
	s.mu.Unlock()
	for id, l := range held {
		s.report(ctx, id, l, false, false)
	}
}

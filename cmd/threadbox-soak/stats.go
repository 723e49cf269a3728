package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// stats counts what every operation did: successes with their latency,
// designed errors by kind, and errors outside the designed ones.
type stats struct {
	mu         sync.Mutex
	ops        map[string]*opStats
	undesigned []string // a sample of the errors outside the designed ones
	nUndesign  int
}

type opStats struct {
	ok        int
	latencies []time.Duration
	designed  map[string]int
	bad       int
}

func newStats() *stats { return &stats{ops: map[string]*opStats{}} }

func (s *stats) op(name string) *opStats {
	o := s.ops[name]
	if o == nil {
		o = &opStats{designed: map[string]int{}}
		s.ops[name] = o
	}
	return o
}

// ok records a success.
func (s *stats) ok(name string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.op(name)
	o.ok++
	o.latencies = append(o.latencies, d)
}

// designed records an error answer the design provides for.
func (s *stats) designed(name, kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.op(name).designed[kind]++
}

// bad records an error outside the designed ones (or a wrong answer).
func (s *stats) bad(name string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.op(name).bad++
	s.nUndesign++
	if len(s.undesigned) < 30 {
		s.undesigned = append(s.undesigned, fmt.Sprintf("%s: %v", name, err))
	}
}

// totals returns the operations done and the errors outside the design.
func (s *stats) totals() (ops, designed, bad int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.ops {
		ops += o.ok + o.bad
		for _, n := range o.designed {
			ops += n
			designed += n
		}
		bad += o.bad
	}
	return ops, designed, bad
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(p * float64(len(ds)-1))
	return ds[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

// table prints one row per operation.
func (s *stats) table(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.ops))
	for n := range s.ops {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "| operation | ok | designed errors | other errors | p50 | p95 | p99 | max |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|---:|")
	for _, n := range names {
		o := s.ops[n]
		l := append([]time.Duration(nil), o.latencies...)
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		var kinds []string
		for k, c := range o.designed {
			kinds = append(kinds, fmt.Sprintf("%s×%d", k, c))
		}
		sort.Strings(kinds)
		d := strings.Join(kinds, ", ")
		if d == "" {
			d = "—"
		}
		fmt.Fprintf(w, "| %s | %d | %s | %d | %s | %s | %s | %s |\n", n, o.ok, d, o.bad, ms(pct(l, .5)), ms(pct(l, .95)), ms(pct(l, .99)), ms(pct(l, 1)))
	}
}

package sandbox

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestLimitsOr(t *testing.T) {
	d := Limits{MemoryBytes: 512, CPUs: 1, Pids: 256, NoFile: 1024, DiskBytes: 1 << 20, TmpBytes: 64}
	tests := []struct {
		name string
		l    Limits
		want Limits
	}{
		{"zero takes every default", Limits{}, d},
		{"set fields stay", Limits{MemoryBytes: 1, CPUs: 0.5, Pids: 2, NoFile: 3, DiskBytes: 4, TmpBytes: 5}, Limits{MemoryBytes: 1, CPUs: 0.5, Pids: 2, NoFile: 3, DiskBytes: 4, TmpBytes: 5}},
		{"negative is unset", Limits{MemoryBytes: -1, CPUs: -2, TmpBytes: 7}, Limits{MemoryBytes: 512, CPUs: 1, Pids: 256, NoFile: 1024, DiskBytes: 1 << 20, TmpBytes: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.l.Or(d); got != tt.want {
				t.Errorf("Or = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCPUSeconds(t *testing.T) {
	tests := []struct {
		sec  float64
		want time.Duration
	}{
		{1.5, 1500 * time.Millisecond},
		{0, 0},
		{-1, 0},
		{math.NaN(), 0},
		{math.Inf(1), 0},
		{2e9, 0},
	}
	for _, tt := range tests {
		if got := CPUSeconds(tt.sec); got != tt.want {
			t.Errorf("CPUSeconds(%v) = %v, want %v", tt.sec, got, tt.want)
		}
	}
}

// TestExitCPU: a call that ended its process counts what the exit
// accounting holds beyond the calls already metered; nothing when the
// process failed to report, reports less, or has not ended in time.
func TestExitCPU(t *testing.T) {
	ended := make(chan struct{})
	close(ended)
	tests := []struct {
		name    string
		done    chan struct{}
		res     Result
		err     error
		metered time.Duration
		want    time.Duration
	}{
		{"beyond the metered", ended, Result{CPUTime: 3 * time.Second}, nil, time.Second, 2 * time.Second},
		{"nothing beyond", ended, Result{CPUTime: time.Second}, nil, 2 * time.Second, 0},
		{"end unknown", ended, Result{CPUTime: 3 * time.Second}, errors.New("gone"), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ExitCPU(tt.done, func() (Result, error) { return tt.res, tt.err }, tt.metered); got != tt.want {
				t.Fatalf("ExitCPU = %v, want %v", got, tt.want)
			}
		})
	}
	if testing.Short() {
		return
	}
	start := time.Now()
	if got := ExitCPU(make(chan struct{}), func() (Result, error) { return Result{CPUTime: time.Hour}, nil }, 0); got != 0 || time.Since(start) < ExitWait {
		t.Fatalf("a process that never ended: %v after %v, want 0 after %v", got, time.Since(start), ExitWait)
	}
}

func TestCPUQuotaMicros(t *testing.T) {
	for _, tt := range []struct {
		cpus float64
		want int64
	}{
		{1, 10_000},
		{0.5, 5_000},
		{2.5, 25_000},
		{0.01, 1_000}, // the kernel's minimum quota
	} {
		if got := (Limits{CPUs: tt.cpus}).CPUQuotaMicros(); got != tt.want {
			t.Errorf("CPUs %v: quota %d µs, want %d", tt.cpus, got, tt.want)
		}
	}
}

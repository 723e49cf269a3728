package sandbox

import (
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

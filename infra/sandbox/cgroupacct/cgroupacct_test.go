package cgroupacct

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRead reads both cgroup versions' CPU accounting files and refuses
// what is not one.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content string
		v2            bool
		want          time.Duration
		ok            bool
	}{
		{"v1 nanoseconds", "1500000000\n", false, 1500 * time.Millisecond, true},
		{"v2 cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n", true, 2500 * time.Millisecond, true},
		{"v2 without usage", "user_usec 1\n", true, 0, false},
		{"v1 garbage", "many\n", false, 0, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, string(rune('a'+i)))
			if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			got, ok := CPU{Path: p, V2: tt.v2}.Read()
			if got != tt.want || ok != tt.ok {
				t.Fatalf("Read = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
	if _, ok := (CPU{}).Read(); ok {
		t.Fatal("the zero CPU read as known")
	}
	if _, ok := (CPU{Path: filepath.Join(dir, "gone")}).Read(); ok {
		t.Fatal("a missing group read as known")
	}
	// This process's own group is found and counts something. Under CI
	// the host has CPU accounting (the sandbox backends rely on it).
	c := ForProcess(os.Getpid(), "/sys/fs/cgroup")
	if c.Path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no CPU accounting found for this process's control group")
		}
		t.Skip("no CPU accounting found for this process's control group")
	}
	if d, ok := c.Read(); !ok || d <= 0 {
		t.Fatalf("own group %s: %v %v", c.Path, d, ok)
	}
}

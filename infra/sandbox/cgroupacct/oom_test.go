package cgroupacct

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseOOMKill(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int64
		ok   bool
	}{
		{"cgroup v1 oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3, true},
		{"cgroup v2 memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n", 2, true},
		{"old kernel without counter", "oom_kill_disable 0\nunder_oom 0\n", 0, false},
		{"garbage", "oom_kill x\n", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseOOMKill(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("parseOOMKill = %d, %v; want %d, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestOOMRead reads the counter from a file, and nothing from a missing
// file or an unknown counter.
func TestOOMRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "memory.oom_control")
	if err := os.WriteFile(p, []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, ok := (OOM{Path: p}).Read(); !ok || n != 4 {
		t.Fatalf("Read = %d, %v; want 4, true", n, ok)
	}
	if _, ok := (OOM{Path: p + ".missing"}).Read(); ok {
		t.Fatal("a missing file read as ok")
	}
	if _, ok := (OOM{}).Read(); ok {
		t.Fatal("the zero OOM read as ok")
	}
}

// TestAt finds a control group's CPU and OOM counters by its path on
// either cgroup version, and nothing where it has none.
func TestAt(t *testing.T) {
	write := func(p, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v1 := t.TempDir()
	write(filepath.Join(v1, "cpuacct", "g", "s1", "cpuacct.usage"), "2000000000\n")
	write(filepath.Join(v1, "memory", "g", "s1", "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
	v2 := t.TempDir()
	write(filepath.Join(v2, "g", "s1", "cpu.stat"), "usage_usec 1000000\n")
	write(filepath.Join(v2, "g", "s1", "memory.events"), "oom 1\noom_kill 1\n")
	tests := []struct {
		name, root, path string
		cpu              time.Duration
		oom              int64
		known            bool
	}{
		{"cgroup v1", v1, "/g/s1", 2 * time.Second, 2, true},
		{"cgroup v2", v2, "/g/s1", time.Second, 1, true},
		{"no such group", v1, "/g/none", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cpu, oom := At(tt.root, tt.path)
			c, cok := cpu.Read()
			o, ook := oom.Read()
			if cok != tt.known || ook != tt.known || c != tt.cpu || o != tt.oom {
				t.Errorf("At = cpu %v %v, oom %d %v; want %v %d %v", c, cok, o, ook, tt.cpu, tt.oom, tt.known)
			}
		})
	}
}

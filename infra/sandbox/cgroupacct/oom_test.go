package docker

import "testing"

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

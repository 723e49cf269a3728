package docker

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"threadbox/infra/sandbox/cgroupacct"
)

// TestDeathReasonAndKills: the daemon (Docker 20.10) sets a container's
// OOMKilled only when the runtime's OOM event reaches it before the
// exit's, which under gVisor it sometimes does not, and the container's
// memory cgroup counter goes with the container. So the box's kill count
// goes on from the watch once the group is gone: a count taken before the
// command and one after the container died differ when its group ran out
// (boxes.Ops.Exec then says out of memory), whatever the daemon says. The
// daemon's answer comes from a stand-in, as the race cannot be forced on
// a real one.
func TestDeathReasonAndKills(t *testing.T) {
	cases := []struct {
		name      string
		daemonOOM bool
		exitCode  int
		watchKill bool
		want      string
	}{
		{name: "the daemon saw the kill", daemonOOM: true, exitCode: 137, watchKill: true, want: ": container ended (out of memory, exit code 137)"},
		{name: "only the watch saw the kill", exitCode: 137, watchKill: true, want: ": container ended (exit code 137)"},
		{name: "killed, not for memory", exitCode: 137, want: ": container ended (exit code 137)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			daemon := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.HasSuffix(r.URL.Path, "/containers/c1/json") {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
					ID:    "c1",
					State: &container.State{Status: "exited", OOMKilled: tc.daemonOOM, ExitCode: tc.exitCode},
				}})
			}))
			defer daemon.Close()
			cli, err := client.NewClientWithOpts(client.WithHost(daemon.URL), client.WithVersion("1.41"))
			if err != nil {
				t.Fatal(err)
			}
			b := NewWithClient(cli, Config{})
			defer b.Close()

			events := filepath.Join(t.TempDir(), "memory.events")
			if err := os.WriteFile(events, []byte("oom 0\noom_kill 0\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			ready := make(chan struct{})
			close(ready)
			bx := &box{b: b, id: "s1", dockerID: "c1", oom: cgroupacct.OOM{Path: events}, oomReady: ready}
			w, err := b.ooms.Watch(cgroupacct.OOM{Path: events})
			if err != nil {
				t.Fatal(err)
			}
			bx.oomWatch.Set(w)
			before, ok := bx.OOMKills()
			if !ok || before != 0 {
				t.Fatalf("kills before %d, %v; want 0, true", before, ok)
			}
			if tc.watchKill {
				if err := os.WriteFile(events, []byte("oom 1\noom_kill 1\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			bx.oomWatch.End()                         // the container's stream ended
			if err := os.Remove(events); err != nil { // its group went with it
				t.Fatal(err)
			}
			if got := b.deathReason(bx); got != tc.want {
				t.Fatalf("reason %q, want %q", got, tc.want)
			}
			if n, ok := bx.OOMKills(); !ok || (n > before) != tc.watchKill {
				t.Fatalf("kills after the container went %d, %v; a rise from %d should be %v", n, ok, before, tc.watchKill)
			}
		})
	}
}

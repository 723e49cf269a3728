package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	msgwire "threadbox/app/messages/wire"
	"threadbox/infra/llm/fakeupstream"
)

// bridgeFloodScript opens 1,000 connections to the product's API from
// inside the sandbox; on each it sends a request whose handler stays busy
// (the model takes its time) followed by up to 4 MiB pipelined behind it,
// then
// prints how many connections are still open and how many the host closed.
const bridgeFloodScript = `
import json, os, socket, time
tok = os.environ["ANTHROPIC_AUTH_TOKEN"]
body = json.dumps({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "slow" + "-probe"}]}).encode()
req = (b"POST /api/gpt/v1/messages HTTP/1.1\r\nHost: sandbox\r\nAuthorization: Bearer " + tok.encode() +
       b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
chunk = b"x" * (256 << 10)
socks, failed = [], 0
for i in range(1000):
    try:
        socks.append(socket.create_connection(("127.0.0.1", 47800), timeout=10))
    except OSError:
        failed += 1
pending = {}
for s in socks:
    s.setblocking(False)
    try:
        s.sendall(req)
        pending[s] = 4 << 20
    except OSError:
        pass
deadline = time.time() + 4
while pending and time.time() < deadline:
    for s in list(pending):
        try:
            pending[s] -= s.send(chunk[:pending[s]])
            if pending[s] <= 0:
                del pending[s]
        except BlockingIOError:
            pass
        except OSError:
            del pending[s]
    time.sleep(0.01)
def count():
    open_, closed = 0, failed
    for s in socks:
        try:
            closed += s.recv(1) == b""
        except BlockingIOError:
            open_ += 1
        except OSError:
            closed += 1
    return open_, closed
# The host closes the connections past its limit as it accepts them, which
# takes a while on a loaded machine: count until they are closed, while
# the busy handlers still hold theirs.
deadline = time.time() + 9
open_, closed = count()
while open_ > 64 and time.time() < deadline:
    time.sleep(0.2)
    open_, closed = count()
print(open_, closed)
for s in socks:
    s.close()
`

// bridgeAgainScript waits for the busy handlers to end and then calls the
// API once more.
const bridgeAgainScript = `for i in $(seq 60); do c=$(curl -sS -m 5 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $ANTHROPIC_AUTH_TOKEN" "$ANTHROPIC_BASE_URL/v1/files?scope_id=flood1"); [ "$c" = 200 ] && break; sleep 1; done; echo $c`

// TestSandboxBridgeLimits: a sandbox opening 1,000 connections to the
// in-sandbox API, each with a busy handler and up to 4 MiB pipelined
// behind it, gets at most the bridge's connection limit served (the rest closed
// at once), and the host's heap stays flat (no per-connection buffering
// past the flow-control window); the API answers again once the busy
// handlers are done.
func TestSandboxBridgeLimits(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin})
	cl := msgClient(s, s.bootstrap("acme", "admin@acme.test"))
	var inner sync.Mutex
	probes := 0
	fake.SetFallback(func(_ fakeupstream.Format, body json.RawMessage) fakeupstream.Reply {
		if bytes.Contains(body, []byte("slow-probe")) {
			inner.Lock()
			probes++
			inner.Unlock()
			return fakeupstream.Reply{Delay: 18 * time.Second, Content: []msgwire.ContentBlock{{Type: msgwire.BlockText, Text: "inner"}}}
		}
		return textStep("done")
	})
	fake.Push(steps(
		call("sandbox_bash", map[string]any{"command": "python3 -c '" + strings.ReplaceAll(bridgeFloodScript, "'", `'\''`) + "'", "timeout_seconds": 120}),
		call("sandbox_bash", map[string]any{"command": bridgeAgainScript, "timeout_seconds": 120}),
	))

	// Sample the live heap while the turn runs.
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	var peak uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
				if h := heap(); h > peak {
					peak = h
				}
			}
		}
	}()
	calls, _ := sandboxTurn(t, cl, "flood1")
	close(stop)
	<-sampled
	if len(calls) != 2 {
		t.Fatalf("%d calls", len(calls))
	}
	fields := strings.Fields(calls[0].str("stdout"))
	if len(fields) != 2 {
		t.Fatalf("flood: stdout %q stderr %q", calls[0].str("stdout"), calls[0].str("stderr"))
	}
	open, _ := strconv.Atoi(fields[0])
	closed, _ := strconv.Atoi(fields[1])
	t.Logf("open %d, closed %d, handlers reached %d, heap %d MiB -> peak %d MiB", open, closed, probes, base>>20, peak>>20)
	if open < 1 || open > 64 || open+closed != 1000 {
		t.Fatalf("of 1000 connections %d stayed open and %d were closed: want 1 to 64 open, the rest closed", open, closed)
	}
	if grown := int64(peak) - int64(base); grown > 64<<20 {
		t.Fatalf("the host's heap grew by %d MiB while the sandbox flooded the bridge", grown>>20)
	}
	if got := strings.TrimSpace(calls[1].str("stdout")); got != "200" {
		t.Fatalf("the API after the flood: %q (stderr %q)", got, calls[1].str("stderr"))
	}
}

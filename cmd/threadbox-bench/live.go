package main

// The live turns section: how soon a line a command writes in
// its sandbox reaches a follower of the chat turn's event stream, beside
// the same command's lines read from a host pipe (the floor: the command
// and the clock, no sandbox, no server); and the server's memory while 1
// and then 50 followers read a turn whose command prints 10 MiB.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"threadbox/app/messages/wire"
)

// liveOpts configure the live turns section.
type liveOpts struct {
	lines     int   // lines of the latency command, 100 ms apart
	followers int   // followers of the flood turn
	flood     int64 // bytes the flood command prints
}

// stampScript prints the clock in nanoseconds n times, 100 ms apart.
func stampScript(n int) string {
	return fmt.Sprintf("for i in $(seq 1 %d); do date +%%s%%N; sleep 0.1; done", n)
}

// stampLatencies reads lines of nanosecond stamps and returns how long
// after its stamp each line arrived.
func stampLatencies(text string, at time.Time, out *[]time.Duration) {
	for _, ln := range strings.Split(strings.TrimSpace(text), "\n") {
		ns, err := strconv.ParseInt(strings.TrimSpace(ln), 10, 64)
		if err != nil {
			continue
		}
		*out = append(*out, at.Sub(time.Unix(0, ns)))
	}
}

func benchLive(ctx context.Context, o opts, out io.Writer) error {
	lo := o.live
	srv, done, err := startDockerThreadbox(ctx, o, "live", "MODEL_PROVIDER=runner", "LOG_LEVEL=warn")
	if err != nil {
		return err
	}
	defer done()
	tid, err := benchThread(srv)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "bench: live output warm-up")
	if _, err := followTurn(ctx, srv, tid, "true", nil); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}

	// The floor: the same command's lines through a host pipe.
	var floor []time.Duration
	cmd := exec.CommandContext(ctx, "bash", "-c", stampScript(lo.lines))
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		stampLatencies(sc.Text(), time.Now(), &floor)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("host command: %w", err)
	}

	fmt.Fprintln(os.Stderr, "bench: live output latency")
	var through []time.Duration
	if _, err := followTurn(ctx, srv, tid, stampScript(lo.lines), func(o wire.ToolOutput, at time.Time) {
		stampLatencies(o.Text, at, &through)
	}); err != nil {
		return err
	}
	if len(through) < lo.lines*9/10 {
		return fmt.Errorf("only %d of %d lines arrived live", len(through), lo.lines)
	}

	fmt.Fprintln(os.Stderr, "bench: followers of a flood")
	flood := fmt.Sprintf("head -c %d /dev/zero | tr '\\0' 'x' | fold -w 99", lo.flood)
	mem := func(followers int) (before, growth int64, err error) {
		pid := srv.cmd.Process.Pid
		settleServer()
		before, err = procStatus(pid, "VmRSS")
		if err != nil {
			return 0, 0, err
		}
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
			return 0, 0, err
		}
		var wg sync.WaitGroup
		errs := make(chan error, followers)
		turnID, err := followTurn(ctx, srv, tid, flood, nil, func(turnID string) {
			for range followers - 1 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := readEvents(ctx, srv, "/api/v1/app/thread/"+tid+"/turns/"+turnID+"/events", nil); err != nil {
						errs <- err
					}
				}()
			}
		})
		wg.Wait()
		close(errs)
		if err == nil {
			err = <-errs
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%d followers of %s: %w", followers, turnID, err)
		}
		hwm, err := procStatus(pid, "VmHWM")
		return before, hwm - before, err
	}
	before1, growth1, err := mem(1)
	if err != nil {
		return err
	}
	beforeN, growthN, err := mem(lo.followers)
	if err != nil {
		return err
	}

	p50, p99 := percentiles(through)
	f50, f99 := percentiles(floor)
	fmt.Fprintf(out, "\nLive turns: %d lines 100 ms apart, chat turn on docker/%s, runner model; a follower reads the turn's SSE stream.\n\n", lo.lines, o.runtime)
	fmt.Fprintln(out, "| from a line written by the command to | p50 | p99 | target |")
	fmt.Fprintln(out, "|---|---:|---:|---|")
	fmt.Fprintf(out, "| an SSE follower of the chat turn (%d lines) | %s | %s | p50 ≤ 20 ms: %s |\n", len(through), ms(p50), ms(p99), yesNo(p50 <= 20*time.Millisecond, ""))
	fmt.Fprintf(out, "| a host pipe, the same command without sandbox or server (floor) | %s | %s | — |\n", ms(f50), ms(f99))
	fmt.Fprintf(out, "| threadbox's share (follower minus floor) | %s | %s | — |\n", ms(p50-f50), ms(p99-f99))
	fmt.Fprintf(out, "\n| followers of one turn printing %s | server RSS before | peak growth during the turn |\n", mib(lo.flood))
	fmt.Fprintln(out, "|---|---:|---:|")
	fmt.Fprintf(out, "| 1 (the request that started it) | %s | %s |\n", mib(before1), mib(growth1))
	fmt.Fprintf(out, "| %d | %s | %s (×%.1f of one follower's) |\n", lo.followers, mib(beforeN), mib(growthN), float64(growthN)/float64(max(growth1, 1)))
	return nil
}

// settleServer gives the server a moment to settle between rows.
func settleServer() { time.Sleep(500 * time.Millisecond) }

// benchThread makes a project and a thread and returns the thread's id.
func benchThread(srv *threadboxProc) (string, error) {
	create := func(path string, body map[string]any) (string, error) {
		j, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", srv.base+path, bytes.NewReader(j))
		req.Header.Set("Authorization", "Bearer "+srv.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var v struct{ ID string }
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusCreated {
			return "", fmt.Errorf("POST %s: %d %v", path, resp.StatusCode, err)
		}
		return v.ID, nil
	}
	pid, err := create("/api/v1/app/project", map[string]any{"name": "bench"})
	if err != nil {
		return "", err
	}
	return create("/api/v1/app/thread", map[string]any{"project_id": pid, "title": "live"})
}

// followTurn runs script in a chat turn of the thread with a streamed
// POST and reads its events to the end, calling onOutput with each live
// output event as it arrives and started with the turn's id once it is
// known. It returns the turn's id.
func followTurn(ctx context.Context, srv *threadboxProc, tid, script string, onOutput func(wire.ToolOutput, time.Time), started ...func(string)) (string, error) {
	body, _ := json.Marshal(map[string]any{"content": "```bash\n" + script + "\n```", "stream": true, "pgpt": map[string]any{"tools": []string{"code_execution"}}})
	req, err := http.NewRequestWithContext(ctx, "POST", srv.base+"/api/v1/app/thread/"+tid+"/messages", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+srv.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	turnID := resp.Header.Get("Threadbox-Turn-Id")
	if resp.StatusCode != http.StatusOK || turnID == "" {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("turn: %d %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	for _, f := range started {
		f(turnID)
	}
	_, err = scanEvents(resp.Body, onOutput)
	return turnID, err
}

// readEvents follows a turn's events at path to their end.
func readEvents(ctx context.Context, srv *threadboxProc, path string, onOutput func(wire.ToolOutput, time.Time)) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", srv.base+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+srv.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return scanEvents(resp.Body, onOutput)
}

// scanEvents reads an event stream to its end: the number of events, and
// an error when it did not end with message_stop.
func scanEvents(r io.Reader, onOutput func(wire.ToolOutput, time.Time)) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	n, name, last := 0, "", ""
	for sc.Scan() {
		ln := sc.Text()
		switch {
		case strings.HasPrefix(ln, "event: "):
			name = strings.TrimPrefix(ln, "event: ")
		case strings.HasPrefix(ln, "data: "):
			n++
			last = name
			if name == wire.EventToolOutput && onOutput != nil {
				var o wire.ToolOutput
				if err := json.Unmarshal([]byte(strings.TrimPrefix(ln, "data: ")), &o); err == nil {
					onOutput(o, time.Now())
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return n, err
	}
	if last != wire.EventMessageStop {
		return n, fmt.Errorf("the stream ended with %q", last)
	}
	return n, nil
}

package main

// The Messages API section: the latency threadbox adds to a model
// call, measured against calling the same fake upstream directly on
// loopback and against a bare proxy (floor.go), and the tool loop's own
// overhead per iteration.

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
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"threadbox/app/messages/wire"
	"threadbox/domain/sandbox"
	"threadbox/infra/llm/fakeupstream"
)

// messagesOpts configure the Messages API section.
type messagesOpts struct {
	n     int    // requests per latency row
	loops int    // requests per tool-loop row
	iters int    // tool iterations per tool-loop request
	procs string // THREADBOX_PROCS of the server; "" is its default
	rows  string // when set, only latency rows whose name contains it run
}

// latencyRow compares threadbox with the direct call.
type latencyRow struct {
	name            string
	n               int
	direct, through []time.Duration
	floor           []time.Duration // through the bare proxy (floor.go)
	target50        time.Duration   // target for the added p50
	target99        time.Duration   // target for the added p99; 0 = none
	cpu             time.Duration   // threadbox's CPU time per request
	floorCPU        time.Duration   // the bare proxy's
}

var loopPrompt = regexp.MustCompile(`loop (\d+)`)

// rounds is how many turns direct and threadbox requests take in a row.
const rounds = 8

// modelTime is how long the paced rows' model takes to answer: well under
// any real model's time to first token, long enough that 16 requests in
// flight leave the CPUs mostly idle.
const modelTime = 20 * time.Millisecond

// benchReply answers the bench's requests: "loop N" asks for N rounds of
// `true` through bash_code_execution, "paced" a short text after
// modelTime, anything else a short text at once.
func benchReply(_ fakeupstream.Format, body json.RawMessage) fakeupstream.Reply {
	text := fakeupstream.Reply{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "ok, done."}}, Usage: wire.Usage{InputTokens: 12, OutputTokens: 3}}
	if bytes.Contains(body, []byte(`"paced"`)) {
		text.Delay = modelTime
		return text
	}
	m := loopPrompt.FindSubmatch(body)
	if m == nil {
		return text
	}
	want, _ := strconv.Atoi(string(m[1]))
	if bytes.Count(body, []byte(`"tool_result"`)) >= want {
		return text
	}
	return fakeupstream.Reply{Content: []wire.ContentBlock{{
		Type: wire.BlockToolUse, ID: fmt.Sprintf("toolu_%d", time.Now().UnixNano()),
		Name: wire.SubToolBash, Input: json.RawMessage(`{"command":"true"}`),
	}}}
}

// benchMessages starts the fake upstream and a threadbox using it (docker
// sandboxes for the tool loop) and prints the Messages API table.
func benchMessages(ctx context.Context, o opts, out io.Writer) error {
	mo := o.messages
	up := fakeupstream.New()
	defer up.Close()
	up.SetFallback(benchReply)

	srv, done, err := startDockerThreadbox(ctx, o, "messages",
		"MODEL_PROVIDER=anthropic", "MODEL_BASE_URL="+up.URL(), "MODEL_NAME=bench-model", "MAX_TOOL_ITERATIONS=100", "THREADBOX_PROCS="+mo.procs)
	if err != nil {
		return err
	}
	defer done()
	floor, err := startFloorProxy(ctx, up.URL(), serverProcs(mo.procs))
	if err != nil {
		return err
	}
	defer floor.stop()

	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}}
	upBody := `{"model":"bench-model","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`
	upStream := `{"model":"bench-model","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hello"}]}`
	tbBody := `{"model":"default","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`
	tbStream := `{"model":"default","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hello"}]}`
	tbTool := `{"model":"default","max_tokens":64,"container":"bench","tools":[{"type":"code_execution_20250825","name":"code_execution"}],"messages":[{"role":"user","content":"hello"}]}`
	direct := func(body string) func() (time.Duration, error) {
		return func() (time.Duration, error) { return post(hc, up.URL()+"/v1/messages", "", body) }
	}
	through := func(body string) func() (time.Duration, error) {
		return func() (time.Duration, error) { return post(hc, srv.base+"/api/gpt/v1/messages", srv.token, body) }
	}
	proxied := func(body string) func() (time.Duration, error) {
		return func() (time.Duration, error) { return post(hc, floor.base+"/v1/messages", "", body) }
	}
	// Warm up: connections, the container record, the code paths.
	for range 20 {
		for _, f := range []func() (time.Duration, error){direct(upBody), proxied(upBody), through(tbBody), through(tbTool), direct(upStream), proxied(upStream), through(tbStream)} {
			if _, err := f(); err != nil {
				return err
			}
		}
	}

	longHistory := longHistoryBody()
	paced := func(body string) string { return strings.Replace(body, `"hello"`, `"paced"`, 1) }
	// The direct call of each row sends the very body threadbox sends
	// upstream for its request (model resolved, sub-tool definitions
	// included), so that the upstream has the same work on both sides.
	sent := func(tb string) (string, error) {
		if _, err := through(tb)(); err != nil {
			return "", err
		}
		reqs := up.Requests()
		return string(reqs[len(reqs)-1].Body), nil
	}
	type rowSpec struct {
		name     string
		up, tb   string
		t50, t99 time.Duration
	}
	var (
		full   = rowSpec{"non-streaming, full response", "", tbBody, 500 * time.Microsecond, 2 * time.Millisecond}
		tool   = rowSpec{"non-streaming, code_execution tool offered (container resolved)", "", tbTool, 500 * time.Microsecond, 2 * time.Millisecond}
		stream = rowSpec{"streaming, time to first byte", "", tbStream, time.Millisecond, 0}
		// With a model that takes its time, 16 requests are in flight at
		// once without the CPUs being saturated by them.
		pacedFull   = rowSpec{fmt.Sprintf("non-streaming, model answering in %s", modelTime), "", paced(tbBody), 500 * time.Microsecond, 2 * time.Millisecond}
		pacedStream = rowSpec{fmt.Sprintf("streaming, time to first byte, model answering in %s", modelTime), "", paced(tbStream), time.Millisecond, 0}
		// A long conversation resends its history every turn; it is
		// measured and shown, with no target of its own.
		long = rowSpec{fmt.Sprintf("non-streaming, %d KiB history of %d messages", len(longHistory)>>10, longMessages), "", longHistory, 0, 0}
	)
	for _, r := range []*rowSpec{&full, &tool, &stream, &pacedFull, &pacedStream, &long} {
		if r.up, err = sent(r.tb); err != nil {
			return err
		}
	}
	var rows []latencyRow
	for _, c := range []int{1, 16} {
		specs := []rowSpec{full, tool, stream}
		if c == 1 {
			specs = append(specs, long)
		}
		if c > 1 {
			specs = append(specs, pacedFull, pacedStream)
		}
		for _, r := range specs {
			if !strings.Contains(fmt.Sprintf("%s, concurrency %d", r.name, c), mo.rows) {
				continue
			}
			fmt.Fprintf(os.Stderr, "bench: messages %s, concurrency %d\n", r.name, c)
			// Direct, bare-proxy and threadbox requests take turns in
			// rounds, so that the machine's drift over the row weighs on
			// all alike.
			var d, f, t []time.Duration
			var cpu, fcpu time.Duration
			for range rounds {
				dd, err := timedConcurrent(c, mo.n/rounds, direct(r.up))
				if err != nil {
					return fmt.Errorf("direct: %w", err)
				}
				fcpu0 := procCPU(floor.cmd.Process.Pid)
				ff, err := timedConcurrent(c, mo.n/rounds, proxied(r.up))
				if err != nil {
					return fmt.Errorf("bare proxy: %w", err)
				}
				fcpu += procCPU(floor.cmd.Process.Pid) - fcpu0
				f = append(f, ff...)
				cpu0 := procCPU(srv.cmd.Process.Pid)
				tt, err := timedConcurrent(c, mo.n/rounds, through(r.tb))
				if err != nil {
					return fmt.Errorf("threadbox: %w", err)
				}
				cpu += procCPU(srv.cmd.Process.Pid) - cpu0
				d, t = append(d, dd...), append(t, tt...)
			}
			cpu /= time.Duration(max(1, len(t)))
			fcpu /= time.Duration(max(1, len(f)))
			rows = append(rows, latencyRow{fmt.Sprintf("%s, concurrency %d", r.name, c), len(t), d, t, f, r.t50, r.t99, cpu, fcpu})
		}
	}

	// Tool-loop overhead: a request with k rounds of `true` minus one with
	// none is k × (model call + command + loop overhead); the model calls
	// are the direct upstream p50s of the bodies the loop sent and the
	// commands the agent's own round trips, in a sandbox of the same image
	// and runtime driven through the backend. Each round times the three
	// one after another (a request with none, one with k, k commands), so
	// that they meet the same conditions; the row is the median over the
	// rounds of the request's difference less the round's commands. (Timed
	// apart, the request p50 and the command p50 drifted by more than the
	// overhead between runs.)
	fmt.Fprintln(os.Stderr, "bench: messages tool loop")
	loop0 := `{"model":"default","max_tokens":64,"container":"bench","tools":[{"type":"code_execution_20250825","name":"code_execution"}],"messages":[{"role":"user","content":"loop 0"}]}`
	loopK := strings.Replace(loop0, "loop 0", "loop "+strconv.Itoa(mo.iters), 1)
	agentBin, err := filepath.Abs(o.agentBin)
	if err != nil {
		return err
	}
	const cmdID = "bench-msg"
	be, beDone, err := benchSandbox(ctx, o, agentBin, cmdID)
	if err != nil {
		return fmt.Errorf("command sandbox: %w", err)
	}
	defer beDone()
	command := func() (time.Duration, error) {
		start := time.Now()
		_, err := be.Exec(ctx, cmdID, sandbox.Command{Args: []string{"bash", "-c", "true"}})
		return time.Since(start), err
	}
	for range 3 {
		if _, err := through(loopK)(); err != nil {
			return err
		}
		if _, err := command(); err != nil {
			return err
		}
	}
	// Each part starts after a pause in which the work a turn leaves off
	// its response's path (its runs' records, its token's revocation) is
	// done, as it is before a client's next request in use.
	const pause = 20 * time.Millisecond
	var t0, tk, cmd, rounds []time.Duration
	for range mo.loops {
		time.Sleep(pause)
		a, err := through(loop0)()
		if err != nil {
			return err
		}
		time.Sleep(pause)
		b, err := through(loopK)()
		if err != nil {
			return err
		}
		time.Sleep(pause)
		var c time.Duration
		for range mo.iters {
			d, err := command()
			if err != nil {
				return err
			}
			c += d
			cmd = append(cmd, d)
		}
		t0, tk, rounds = append(t0, a), append(tk, b), append(rounds, b-a-c)
	}
	// The model calls the loop makes, each sent directly with the very
	// body threadbox sent upstream (the history grows with every round):
	// what the upstream takes for them is the model's time, not the loop's.
	// The last round's request with k calls was the last the upstream saw.
	reqs := up.Requests()
	if len(reqs) < mo.iters+1 {
		return fmt.Errorf("tool loop: the upstream saw %d requests, want %d", len(reqs), mo.iters+1)
	}
	directP50 := func(body json.RawMessage) (time.Duration, error) {
		d, err := timedConcurrent(1, max(20, mo.n/(mo.iters+1)), direct(string(body)))
		p50, _ := percentiles(d)
		return p50, err
	}
	var loopModel time.Duration
	for _, r := range reqs[len(reqs)-mo.iters-1:] {
		p50, err := directP50(r.Body)
		if err != nil {
			return err
		}
		loopModel += p50
	}
	if _, err := through(loop0)(); err != nil {
		return err
	}
	reqs = up.Requests()
	model0, err := directP50(reqs[len(reqs)-1].Body)
	if err != nil {
		return err
	}
	model, err := timedConcurrent(1, mo.n, direct(upBody))
	if err != nil {
		return err
	}
	p0, _ := percentiles(t0)
	pk, _ := percentiles(tk)
	pm, _ := percentiles(model)
	pc, _ := percentiles(cmd)
	pr, _ := percentiles(rounds)
	perIter := (pr - (loopModel - model0)) / time.Duration(mo.iters)

	// Where the added time goes: the HTTP edge alone, and with the bearer
	// token's verification (JWT and the token, user and org lookups).
	get := func(path, token string) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			req, _ := http.NewRequest("GET", srv.base+path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			start := time.Now()
			resp, err := hc.Do(req)
			if err != nil {
				return 0, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return time.Since(start), nil
		}
	}
	health, err := timedConcurrent(1, mo.n, get("/healthz", ""))
	if err != nil {
		return err
	}
	me, err := timedConcurrent(1, mo.n, get("/api/v1/app/me", srv.token))
	if err != nil {
		return err
	}

	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(out, "\n### Messages API over the fake upstream on loopback (n=%d per row), %s, load average %s\n\n",
		mo.n, time.Now().UTC().Format(time.RFC3339), strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
	procs := mo.procs
	if procs == "" {
		procs = "auto"
	}
	fmt.Fprintf(out, "threadbox with THREADBOX_PROCS=%s (%d CPUs here). The bench client, the fake upstream and threadbox share this machine's cores: at concurrency 16 the added latency is mostly queueing for CPU. "+
		"Each direct call sends the body threadbox sends upstream. The bare proxy (a Fiber server forwarding through net/http, no work of its own, same scheduler size) is the floor of one more HTTP hop on this machine.\n", procs, runtime.NumCPU())
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| measurement | direct p50 | direct p99 | threadbox p50 | threadbox p99 | added p50 | added p99 | target | ratio p50 | ratio p99 | threadbox CPU per request | bare proxy added p50 | bare proxy added p99 | bare proxy CPU per request | CPU / bare proxy's (target ≤ 1.5 at concurrency 1, ≤ 2 at 16) | added p50 / bare proxy's (target ≤ 2 at concurrency 16) |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		d50, d99 := percentiles(r.direct)
		t50, t99 := percentiles(r.through)
		f50, f99 := percentiles(r.floor)
		a50, a99 := t50-d50, t99-d99
		target, ratio50, ratio99 := "none (for information)", "—", "—"
		if r.target50 > 0 {
			target, ratio50 = "added p50 ≤ "+ms(r.target50), fmt.Sprintf("%.2f", float64(a50)/float64(r.target50))
		}
		if r.target99 > 0 {
			target += ", p99 ≤ " + ms(r.target99)
			ratio99 = fmt.Sprintf("%.2f", float64(a99)/float64(r.target99))
		}
		// Against the bare proxy, from the unrounded figures.
		vs := func(a, b time.Duration) string {
			if b <= 0 {
				return "—"
			}
			return fmt.Sprintf("%.2f", float64(a)/float64(b))
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.name, ms(d50), ms(d99), ms(t50), ms(t99), ms(a50), ms(a99), target, ratio50, ratio99, ms(r.cpu), ms(f50-d50), ms(f99-d99), ms(r.floorCPU), vs(r.cpu, r.floorCPU), vs(a50, f50-d50))
	}
	h50, _ := percentiles(health)
	m50, _ := percentiles(me)
	fmt.Fprintf(out, "\nAttribution at concurrency 1: GET /healthz p50 %s (HTTP edge), GET /api/v1/app/me p50 %s (edge + bearer token checks).\n", ms(h50), ms(m50))
	fmt.Fprintf(out, "\n| tool loop (%d iterations of `true`, %d paired rounds) | value |\n|---|---:|\n", mo.iters, mo.loops)
	fmt.Fprintf(out, "| request p50, no tool call | %s |\n| request p50, %d tool calls | %s |\n", ms(p0), mo.iters, ms(pk))
	fmt.Fprintf(out, "| model call p50 (direct, the plain request) | %s |\n", ms(pm))
	fmt.Fprintf(out, "| model calls of one request, %d tool calls (each body sent directly, p50s summed) | %s |\n| model call of one request, no tool call (its body sent directly) | %s |\n", mo.iters, ms(loopModel), ms(model0))
	fmt.Fprintf(out, "| command p50 (agent round trip of bash -c true, in the same rounds) | %s |\n", ms(pc))
	fmt.Fprintf(out, "| a round's request with %d tool calls less the one without and less its %d commands, median | %s |\n", mo.iters, mo.iters, ms(pr))
	fmt.Fprintf(out, "| loop overhead per iteration, median of the rounds less the model calls (target ≤ 1.00 ms) | %s (ratio %.2f) |\n", ms(perIter), float64(perIter)/float64(time.Millisecond))
	return nil
}

// longMessages is how many messages the long-history row's request
// carries, user first and last.
const longMessages = 51

// longHistoryBody is a request carrying longMessages messages of ~2 KiB
// each.
func longHistoryBody() string {
	msgs := make([]string, longMessages)
	for i := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs[i] = fmt.Sprintf(`{"role":%q,"content":[{"type":"text","text":%q}]}`, role, strings.Repeat("lorem ipsum dolor sit amet ", 80))
	}
	return `{"model":"default","max_tokens":64,"messages":[` + strings.Join(msgs, ",") + `]}`
}

// serverProcs is the scheduler size threadbox runs with given
// THREADBOX_PROCS (its default is half the CPUs, at least two where there
// are two: cmd/threadbox's serveProcs); the bare proxy gets the same.
func serverProcs(procs string) int {
	if n, err := strconv.Atoi(procs); err == nil && n > 0 {
		return n
	}
	n := runtime.NumCPU()
	return min(n, max(2, n/2))
}

// threadboxBinary returns the server binary, building it when missing.
func threadboxBinary(ctx context.Context, bin, work string) (string, error) {
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	bin = filepath.Join(work, "threadbox")
	fmt.Fprintln(os.Stderr, "bench: building threadbox")
	if b, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/threadbox").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build threadbox: %w: %s", err, b)
	}
	return bin, nil
}

// post sends one request and returns the time to the first byte of a
// stream, or to the end of a whole response.
func post(hc *http.Client, url, token, body string) (time.Duration, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, bytes.TrimSpace(b))
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		br := bufio.NewReader(resp.Body)
		if _, err := br.Peek(1); err != nil {
			return 0, err
		}
		ttfb := time.Since(start)
		rest, err := io.ReadAll(br)
		if err != nil {
			return 0, err
		}
		if !bytes.Contains(rest, []byte("message_stop")) {
			return 0, fmt.Errorf("stream from %s did not finish: %s", url, rest)
		}
		return ttfb, nil
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// timedConcurrent runs n calls of fn over workers goroutines and collects
// the durations fn reports.
func timedConcurrent(workers, n int, fn func() (time.Duration, error)) ([]time.Duration, error) {
	each := max(1, n/workers)
	var (
		mu    sync.Mutex
		all   []time.Duration
		first error
		wg    sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := make([]time.Duration, 0, each)
			var err error
			for range each {
				var t time.Duration
				if t, err = fn(); err != nil {
					break
				}
				d = append(d, t)
			}
			mu.Lock()
			defer mu.Unlock()
			all = append(all, d...)
			if err != nil && first == nil {
				first = err
			}
		}()
	}
	wg.Wait()
	return all, first
}

// procCPU returns the CPU time all threads of process pid have used so far
// (the first field of each thread's schedstat, in nanoseconds), or 0 when
// /proc does not tell.
func procCPU(pid int) time.Duration {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			total += time.Duration(n)
		}
	}
	return total
}

package main

// The REPL op: each user keeps state in the memory of a process in a
// sandbox of its own (a Python process holding a value, as an interpreter
// holds its variables) and reads it back through the Messages API. The
// state must survive every graceful fault: a SIGTERM restart (Docker
// sandboxes are adopted, gVisor sandboxes are checkpointed and restored)
// and, under a backend that checkpoints, the idle stop. It may be lost
// only when the result says the sandbox started fresh (kill -9 under
// gVisor, a sandbox killed from outside), after a request that failed
// (which may have carried that line), or at the idle stop of a backend
// that keeps files only.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// replState is what a user holds in its REPL sandbox.
type replState struct {
	gen    int       // the container's generation: a new one after the last passed its maximum age
	value  string    // held by the process; "" when none runs
	read   time.Time // when the value was last read back (or set)
	unsure bool      // a request failed since: a fresh start may have gone unsaid
}

// replTally counts the REPL reads of the run.
type replTally struct {
	kept  int      // reads that found the value
	fresh int      // values lost where the design allows it
	lost  []string // values lost after graceful faults only
}

// freshLine starts the line a tool result carries when its container's
// sandbox started fresh (app/containers.FreshNote).
const freshLine = "[threadbox] This container's sandbox started fresh"

// replHolder starts a Python process outside the command's process group
// that holds its second argument in memory and writes it to /tmp/answer
// on SIGUSR1.
const replHolder = `kill "$(cat /tmp/holder.pid 2>/dev/null)" 2>/dev/null; rm -f /tmp/holder.pid; setsid python3 -c '
import os, signal, sys, time
v = sys.argv[2]
def answer(*_):
    with open("/tmp/answer.tmp", "w") as f:
        f.write(v)
    os.rename("/tmp/answer.tmp", "/tmp/answer")
signal.signal(signal.SIGUSR1, answer)
open("/tmp/holder.pid", "w").write(str(os.getpid()))
while True:
    time.sleep(1)
' soak-holder %s >/dev/null 2>&1 </dev/null &
for i in $(seq 100); do test -s /tmp/holder.pid && break; sleep 0.05; done; test -s /tmp/holder.pid && echo started`

// replAsk prints the holder's value, or nothing when no holder runs.
const replAsk = `rm -f /tmp/answer; kill -USR1 "$(cat /tmp/holder.pid 2>/dev/null)" 2>/dev/null && for i in $(seq 100); do test -s /tmp/answer && break; sleep 0.05; done; cat /tmp/answer 2>/dev/null; true`

// repl reads the user's held value back, or starts a holder when none is
// held, and judges a value that is gone.
func (u *user) repl(ctx context.Context) error {
	box := fmt.Sprintf("soak-u%d-repl%d", u.n, u.replState.gen)
	expired := func(err error) bool {
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == 404 && strings.Contains(ae.Message, "maximum age") {
			// Its container passed CONTAINER_MAX_AGE: the value went with
			// it, as designed; the next read starts in a new one.
			u.replState = replState{gen: u.replState.gen + 1}
			return true
		}
		return false
	}
	if u.replState.value == "" {
		v := "v-" + randHex(6)
		out, _, err := u.bash(ctx, box, fmt.Sprintf(replHolder, v))
		if expired(err) {
			return errSkip
		}
		if err != nil {
			return err
		}
		if out != "started\n" {
			return wrongf("REPL holder not started: %q", out)
		}
		u.replState = replState{gen: u.replState.gen, value: v, read: time.Now()}
		return nil
	}
	out, stderr, err := u.bash(ctx, box, replAsk)
	if expired(err) {
		return errSkip
	}
	if err != nil {
		u.replState.unsure = true
		return err
	}
	st := u.replState
	now := time.Now()
	u.replState.read = now
	if out == st.value {
		u.s.mu.Lock()
		u.s.repl.kept++
		u.s.mu.Unlock()
		return nil
	}
	u.replState = replState{gen: st.gen}
	designed := strings.Contains(stderr, freshLine) || st.unsure ||
		(!u.s.cfg.checkpoints() && now.Sub(st.read) > u.s.cfg.idle)
	u.s.mu.Lock()
	defer u.s.mu.Unlock()
	if designed {
		u.s.repl.fresh++
		return nil
	}
	u.s.repl.lost = append(u.s.repl.lost, fmt.Sprintf("user %d read %q, want %q (last read %s ago, no fresh-start line)", u.n, out, st.value, now.Sub(st.read).Round(time.Second)))
	return nil
}

// bash runs script as a bash code block through the Messages API in the
// container box and returns the command's stdout and stderr.
func (u *user) bash(ctx context.Context, box, script string) (string, string, error) {
	cl := anthropic.NewClient(option.WithBaseURL(u.s.srv.base+"/api/gpt"), option.WithAuthToken(u.currentToken()),
		option.WithMaxRetries(0), option.WithRequestTimeout(2*time.Minute), option.WithHTTPClient(u.c.hc))
	p := anthropic.MessageNewParams{Model: "default", MaxTokens: 1024,
		Tools:     []anthropic.ToolUnionParam{{OfCodeExecutionTool20250825: &anthropic.CodeExecutionTool20250825Param{}}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("```bash\n" + script + "\n```"))},
		Container: anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(box)}}
	msg, err := cl.Messages.New(ctx, p)
	if err != nil {
		return "", "", sdkError(err)
	}
	for _, b := range msg.Content {
		if b.Type == "bash_code_execution_tool_result" {
			c := b.AsBashCodeExecutionToolResult().Content
			if c.Type == "bash_code_execution_tool_result_error" {
				return "", "", &toolError{string(c.ErrorCode)}
			}
			r := c.AsResponseBashCodeExecutionResultBlock()
			return r.Stdout, r.Stderr, nil
		}
	}
	return "", "", wrongf("no bash result in %d blocks", len(msg.Content))
}

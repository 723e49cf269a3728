package tools

import (
	"context"
	"errors"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
)

// replInput is the input of repl_execute.
type replInput struct {
	Code           *string  `json:"code"`
	Restart        bool     `json:"restart"`
	TimeoutSeconds *float64 `json:"timeout_seconds"`
}

// ReplResult is the content of a repl_execute result.
type ReplResult struct {
	Type   string  `json:"type"`
	Stdout string  `json:"stdout"`
	Stderr string  `json:"stderr"`
	Value  *string `json:"value"` // repr of the last expression, when not None
	Error  *string `json:"error"` // the traceback of an exception
	Final  *string `json:"final"` // what FINAL() marked, if it was called
	// Restarted reports that this call ran in a fresh REPL: asked for, or
	// the previous one had ended (crashed, killed, sandbox restarted).
	Restarted bool `json:"restarted"`
}

// repl runs a repl_execute call in the container's REPL: an interpreter of
// the Python driver (python.go) of its own, apart from code_execution's.
// Past its timeout the REPL is killed, and its state with it.
func (e *Executor) repl(ctx context.Context, call messages.ToolCall, in replInput) (any, error) {
	if in.Code == nil {
		return nil, invalidInput("Invalid input: 'code' is required.")
	}
	timeout, err := wholeTimeout(in.TimeoutSeconds, e.cfg.MaxTimeout)
	if err != nil {
		return nil, err
	}
	if in.Restart {
		e.repls.reset(call.ContainerID)
	}
	started := time.Now()
	p, from, err := e.takeTurn(ctx, e.repls, call)
	if err != nil {
		return nil, err
	}
	detached := false
	defer func() {
		if !detached {
			<-p.turn
		}
	}()
	end := e.begin(ctx, call.ContainerID)
	ans, cell, err := e.ask(ctx, call, p, *in.Code, map[string]any{"repl": true}, timeout)
	if errors.Is(err, errDetached) {
		// The client went: the code runs on in the REPL, which keeps its
		// state; its turn is given back when it ends.
		detached = true
		go func() {
			ans, _, _ := e.wait(context.Background(), call, p, cell, nil, timeout)
			e.meterCell(p, &cellRun{started: started, end: end}, ans)
			<-p.turn
		}()
		return nil, err
	}
	e.meterCell(p, &cellRun{started: started, end: end}, ans)
	switch {
	case errors.Is(err, errCallTimeout):
		return nil, refuse(wire.CodeExecutionTimeExceeded, "The code ran longer than %ds; the REPL was stopped and its state is lost.", int64(timeout/time.Second))
	case err != nil:
		return nil, err
	}
	rawOut, outCut, rawErr, errCut := cell.rest()
	if ans == nil {
		return nil, refuse(wire.CodeUnavailable, "The Python REPL ended while running the code (it crashed or was killed); its state is lost and the next call starts a clean one. Output before the end:\n%s", messages.CapOutput(rawOut, false, 8192))
	}
	// What subprocesses wrote straight to the streams came first.
	return ReplResult{
		Type:   "repl_execute_result",
		Stdout: messages.CapOutput(append(rawOut, ans.Stdout...), outCut || ans.StdoutTruncated, e.cfg.MaxOutput),
		Stderr: messages.CapOutput(append(rawErr, ans.Stderr...), errCut || ans.StderrTruncated, e.cfg.MaxOutput),
		Value:  ans.Value, Error: ans.Error, Final: ans.Final,
		Restarted: from != kept,
	}, nil
}

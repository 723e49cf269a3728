package tools

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/file"
	"threadbox/domain/sandbox"
)

// bashInput is the input of bash_code_execution.
type bashInput struct {
	Command *string  `json:"command"`
	Timeout *float64 `json:"timeout"`
	Restart bool     `json:"restart"`
}

// bash runs a bash_code_execution call.
func (e *Executor) bash(ctx context.Context, call messages.ToolCall, in bashInput) (*wire.ToolResult, error) {
	if in.Command == nil && !in.Restart {
		return nil, invalidInput("Invalid input: 'command' is required.")
	}
	timeout, err := commandTimeout(in.Timeout, e.cfg.MaxTimeout)
	if err != nil {
		return nil, err
	}
	if in.Restart {
		if err := e.sb.Restart(ctx, call.ContainerID); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			return nil, refuse(wire.CodeUnavailable, "The sandbox could not be restarted: %s", messages.Explain(e.cfg.Log, err))
		}
		if in.Command == nil || strings.TrimSpace(*in.Command) == "" {
			return &wire.ToolResult{Type: wire.ResultBash, Stdout: "Sandbox restarted.\n"}, nil
		}
	}
	end := e.begin(ctx, call.ContainerID)
	started := time.Now()
	res, err := e.sb.Exec(ctx, call.ContainerID, sandbox.Command{
		Args:      []string{"bash", "-c", *in.Command},
		Dir:       sandbox.WorkspaceDir,
		Env:       call.Env,
		Timeout:   timeout,
		MaxOutput: e.cfg.MaxOutput,
		OutputDir: true,
		Output:    sandbox.OutputTo(call.Output),
	})
	// Metered whatever ended it: a command cut short (a stop, a lost
	// client, a dead sandbox) counts as much as one that finished.
	end(res, err)
	if err != nil {
		return nil, err
	}
	out := &wire.ToolResult{
		Type:       wire.ResultBash,
		Stdout:     messages.CapOutput(res.Stdout, res.StdoutTruncated, e.cfg.MaxOutput),
		Stderr:     messages.CapOutput(res.Stderr, res.StderrTruncated, e.cfg.MaxOutput),
		ReturnCode: res.ExitCode,
		Files:      []wire.OutputFile{},
	}
	if res.TimedOut {
		out.ReturnCode = 124
		msg := fmt.Sprintf("Command timed out after %ss.", seconds(timeout))
		// The agent's client already ends stderr with this line; add it only
		// for backends that do not.
		if !strings.HasSuffix(out.Stderr, msg) {
			out.Stderr = joinLine(out.Stderr, msg)
		}
	}
	if res.OOMKilled {
		out.Stderr = joinLine(out.Stderr, "The command was killed: the sandbox ran out of memory.")
	}
	if res.Warning != "" {
		out.Stderr = joinLine(out.Stderr, "[threadbox] "+res.Warning)
	}
	out.Stderr = e.withEgress(out.Stderr, call.ContainerID, started)
	files, err := e.outputFiles(ctx, call.ContainerID, res.OutputFiles, wire.ResultBashOutput)
	if err != nil {
		return nil, err
	}
	out.Files = files
	return out, nil
}

// withEgress ends a result's stderr with the outbound connections its
// container was refused since started, if any: one rule for every tool
// family's result.
func (e *Executor) withEgress(stderr, containerID string, started time.Time) string {
	if e.cfg.Egress == nil {
		return stderr
	}
	if line := e.cfg.Egress.Refused(containerID, started); line != "" {
		return joinLine(stderr, "[threadbox] "+line)
	}
	return stderr
}

// outputFiles lists the files a command or cell handed back, refusing
// one larger than Config.MaxOutputFileBytes.
func (e *Executor) outputFiles(ctx context.Context, containerID string, paths []string, typ string) ([]wire.OutputFile, error) {
	out := []wire.OutputFile{}
	for _, p := range paths {
		if fi, err := e.files.Stat(ctx, containerID, p); err == nil && fi.Size > e.cfg.MaxOutputFileBytes {
			return nil, refuse(wire.CodeOutputFileTooLarge, "The output file %s is %d bytes, more than the %d bytes a result may hand back; it stays in the outputs folder.", p, fi.Size, e.cfg.MaxOutputFileBytes)
		}
		out = append(out, wire.OutputFile{Type: typ, FileID: file.EncodeID(p)})
	}
	return out, nil
}

// joinLine appends line to s on a line of its own.
func joinLine(s, line string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s + line
}

// sandboxBashInput is the input of sandbox_bash.
type sandboxBashInput struct {
	Command        *string  `json:"command"`
	Description    string   `json:"description"`
	TimeoutSeconds *float64 `json:"timeout_seconds"`
	Cwd            string   `json:"cwd"`
}

// SandboxBashFile is a file a sandbox_bash command created or changed in
// the workspace.
type SandboxBashFile struct {
	Path   string `json:"path"`
	FileID string `json:"file_id"`
	Size   int64  `json:"size_bytes"`
}

// SandboxBashResult is the content of a sandbox_bash result.
type SandboxBashResult struct {
	Type        string            `json:"type"`
	Description string            `json:"description,omitempty"`
	Stdout      string            `json:"stdout"`
	Stderr      string            `json:"stderr"`
	ExitCode    int               `json:"exit_code"`
	Truncated   bool              `json:"truncated"`
	Files       []SandboxBashFile `json:"files"`
	FileCount   int               `json:"file_count"`
	LocalPaths  map[string]string `json:"local_paths"`
}

// listScript prints the regular files under the workspace changed after
// the time in $1 (seconds since the epoch), with their sizes, skipping
// hidden folders.
const listScript = `find "$2" -xdev \( -name '.*' -prune \) -o -type f -newermt "@$1" -printf '%s\t%p\n' 2>/dev/null | head -n "$3"`

// sandboxBash runs a sandbox_bash call.
func (e *Executor) sandboxBash(ctx context.Context, call messages.ToolCall, in sandboxBashInput) (any, error) {
	if in.Command == nil || strings.TrimSpace(*in.Command) == "" {
		return nil, invalidInput("Invalid input: 'command' is required.")
	}
	timeout, err := wholeTimeout(in.TimeoutSeconds, e.cfg.MaxTimeout)
	if err != nil {
		return nil, err
	}
	dir := sandbox.WorkspaceDir
	if in.Cwd != "" {
		dir = in.Cwd
		if !path.IsAbs(dir) {
			dir = path.Join(sandbox.WorkspaceDir, dir)
		}
		dir = path.Clean(dir)
	}
	start := e.ended.listFrom(call.ContainerID, time.Now())
	end := e.begin(ctx, call.ContainerID)
	res, err := e.sb.Exec(ctx, call.ContainerID, sandbox.Command{
		Args:      []string{"bash", "-c", *in.Command},
		Dir:       dir,
		Env:       call.Env,
		Timeout:   timeout,
		MaxOutput: e.cfg.MaxOutput,
		Output:    sandbox.OutputTo(call.Output),
	})
	if err != nil {
		if errors.Is(err, sandbox.ErrUnavailable) || ctx.Err() != nil {
			// Cut short (a stop, a lost client, a dead sandbox), unless
			// its sandbox never ran (marked so): metered either way.
			end(res, err)
			return nil, err
		}
		// The command could not start: most often a cwd that does not exist.
		end(res, sandbox.NotStarted(err))
		return nil, invalidInput("The command could not start in %s: %v", dir, err)
	}
	end(res, nil)
	out := SandboxBashResult{
		Type:        "sandbox_bash_result",
		Description: in.Description,
		Stdout:      messages.CapOutput(res.Stdout, res.StdoutTruncated, e.cfg.MaxOutput),
		Stderr:      messages.CapOutput(res.Stderr, res.StderrTruncated, e.cfg.MaxOutput),
		ExitCode:    res.ExitCode,
		Truncated:   res.StdoutTruncated || res.StderrTruncated,
		LocalPaths:  map[string]string{},
	}
	if res.TimedOut {
		// The backend ended stderr with "Command timed out after Ns.".
		out.ExitCode = 124
	}
	out.Stderr = e.withEgress(out.Stderr, call.ContainerID, start)
	out.Files = e.changedFiles(ctx, call, start)
	out.FileCount = len(out.Files)
	for _, f := range out.Files {
		out.LocalPaths[f.Path] = contentURL(f.FileID, call.ScopeID)
	}
	return out, nil
}

// contentURL is the Files API address of a file's bytes: it names the
// container (scope_id), without which the Files API cannot find it.
func contentURL(fileID, scopeID string) string {
	u := "/api/gpt/v1/files/" + fileID + "/content"
	if scopeID != "" {
		u += "?scope_id=" + url.QueryEscape(scopeID)
	}
	return u
}

// listSlack is how far before a command's start sandbox_bash looks for
// files it wrote: a file's mtime comes from the kernel's coarse clock, a
// tick (up to 10 ms) behind the clock the start is read from.
const listSlack = 10 * time.Millisecond

// callEnds remembers when the last sandbox_v1 call in each container
// ended, for as long as it matters: a file written by the call before is
// no file of the next one, even when the next starts within listSlack of
// it (a model answering at machine speed).
type callEnds struct {
	mu sync.Mutex
	at map[string]time.Time
}

// mark records that a call in the container ended at t, and forgets the
// ends that no longer matter.
func (c *callEnds) mark(containerID string, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, at := range c.at {
		if t.Sub(at) > listSlack {
			delete(c.at, id)
		}
	}
	if c.at == nil {
		c.at = map[string]time.Time{}
	}
	c.at[containerID] = t
}

// listFrom returns the time after which a file modified in the container
// counts as written by a command starting at start: listSlack before it,
// but never before the end of the container's previous call.
func (c *callEnds) listFrom(containerID string, start time.Time) time.Time {
	from := start.Add(-listSlack)
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.at[containerID]; ok && at.After(from) {
		from = at
	}
	return from
}

// changedFiles lists the workspace files modified after start.
func (e *Executor) changedFiles(ctx context.Context, call messages.ToolCall, start time.Time) []SandboxBashFile {
	epoch := fmt.Sprintf("%d.%09d", start.Unix(), start.Nanosecond())
	res, err := e.sb.Exec(ctx, call.ContainerID, sandbox.Command{
		Args:      []string{"bash", "-c", listScript, "list", epoch, sandbox.WorkspaceDir, strconv.Itoa(e.cfg.MaxListed)},
		Timeout:   e.cfg.FileOpTimeout,
		MaxOutput: 1 << 20,
	})
	files := []SandboxBashFile{}
	if err != nil || res.ExitCode != 0 {
		return files
	}
	for ln := range strings.SplitSeq(strings.TrimSpace(string(res.Stdout)), "\n") {
		size, p, ok := strings.Cut(ln, "\t")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(size, 10, 64)
		files = append(files, SandboxBashFile{Path: p, FileID: file.EncodeID(p), Size: n})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files
}

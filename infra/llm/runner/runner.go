// Package runner is a deterministic offline Model: it runs the fenced
// ```bash, ```sh and ```python blocks of the last user message, in order,
// through the bash_code_execution sub-tool, then answers with a short
// summary of what ran and where outputs went. A message without code blocks
// gets a reply saying how to configure a real model.
package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/file"
)

// ConfigureHint is the reply to a message without code blocks.
const ConfigureHint = "This server runs the offline runner model: it executes the ```bash, ```sh and ```python " +
	"code blocks of your message in the sandbox and reports what happened, but it does not understand prose. " +
	"To chat with a real model, set MODEL_PROVIDER (anthropic or openai), MODEL_BASE_URL, MODEL_API_KEY " +
	"and MODEL_NAME, and restart the server."

// heredoc ends the python script fed to python3 on stdin.
const heredoc = "THREADBOX_PY_EOF"

// Model is the runner. It implements messages.Model.
type Model struct{}

// New returns the runner model.
func New() *Model { return &Model{} }

// Block is one fenced code block.
type Block struct {
	Lang string // "bash", "sh" or "python"
	Code string
}

var fence = regexp.MustCompile("(?ms)^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$")

// CodeBlocks returns the runnable fenced blocks of text, in order.
func CodeBlocks(text string) []Block {
	var out []Block
	for _, m := range fence.FindAllStringSubmatch(text, -1) {
		lang := strings.ToLower(m[1])
		switch lang {
		case "bash", "sh", "shell":
			lang = "bash"
		case "python", "py", "python3":
			lang = "python"
		default:
			continue
		}
		out = append(out, Block{Lang: lang, Code: strings.TrimRight(m[2], "\n")})
	}
	return out
}

// Command returns the shell command that runs b.
func (b Block) Command() string {
	if b.Lang == "python" {
		return "python3 - <<'" + heredoc + "'\n" + b.Code + "\n" + heredoc
	}
	return b.Code
}

// plan works out the next step from the conversation.
func plan(req messages.StepRequest) []wire.ContentBlock {
	// The prompt is the last user message with text; what follows it are
	// the runner's own calls and their results.
	prompt := -1
	for i := len(req.Messages) - 1; i >= 0 && prompt < 0; i-- {
		if req.Messages[i].Role != wire.RoleUser {
			continue
		}
		for _, b := range req.Messages[i].Content {
			if b.Type == wire.BlockText && strings.TrimSpace(b.Text) != "" {
				prompt = i
				break
			}
		}
	}
	if prompt < 0 {
		return []wire.ContentBlock{text(ConfigureHint)}
	}
	var sb strings.Builder
	for _, b := range req.Messages[prompt].Content {
		if b.Type == wire.BlockText {
			sb.WriteString(b.Text)
			sb.WriteString("\n")
		}
	}
	blocks := CodeBlocks(sb.String())
	if len(blocks) == 0 {
		return []wire.ContentBlock{text(ConfigureHint)}
	}
	canRun := false
	for _, t := range req.Tools {
		if t.Name == wire.SubToolBash {
			canRun = true
		}
	}
	if !canRun {
		// Plain words: this answer reaches chat users too, who never
		// see a tool definition.
		return []wire.ContentBlock{text(fmt.Sprintf("Your message has %d code block(s), but code execution is not enabled for this request, so they were not run.", len(blocks)))}
	}
	calls, results := history(req.Messages[prompt+1:])
	if len(calls) < len(blocks) {
		n := len(calls)
		input, _ := json.Marshal(map[string]string{"command": blocks[n].Command()})
		return []wire.ContentBlock{
			text(fmt.Sprintf("Running block %d of %d (%s).", n+1, len(blocks), blocks[n].Lang)),
			{Type: wire.BlockToolUse, ID: fmt.Sprintf("toolu_runner_%d", n+1), Name: wire.SubToolBash, Input: input},
		}
	}
	return []wire.ContentBlock{text(summary(blocks, calls, results))}
}

func text(s string) wire.ContentBlock {
	return wire.ContentBlock{Type: wire.BlockText, Text: s}
}

// history returns the ids of the runner's bash calls and their results.
func history(msgs []wire.Message) ([]string, map[string]*wire.ToolResult) {
	var calls []string
	results := map[string]*wire.ToolResult{}
	for _, m := range msgs {
		for _, b := range m.Content {
			switch {
			case b.Type == wire.BlockToolUse && b.Name == wire.SubToolBash:
				calls = append(calls, b.ID)
			case b.Type == wire.BlockToolResult:
				var s string
				if json.Unmarshal(b.Content, &s) != nil {
					s = string(b.Content)
				}
				var r wire.ToolResult
				if json.Unmarshal([]byte(s), &r) == nil {
					results[b.ToolUseID] = &r
				}
			}
		}
	}
	return calls, results
}

// summary describes what ran.
func summary(blocks []Block, calls []string, results map[string]*wire.ToolResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Ran %d code block(s) in the sandbox (working directory /home/agent/workspace):\n", len(blocks))
	var outputs []string
	for i, b := range blocks {
		first, _, _ := strings.Cut(strings.TrimSpace(b.Code), "\n")
		if len(first) > 60 {
			first = first[:60] + "…"
		}
		r := results[calls[i]]
		switch {
		case r == nil:
			fmt.Fprintf(&sb, "%d. %s `%s`: no result\n", i+1, b.Lang, first)
		case r.IsError():
			reason := r.ErrorCode
			if r.Detail != nil {
				reason = r.Detail.Explanation
			}
			fmt.Fprintf(&sb, "%d. %s `%s`: could not run (%s)\n", i+1, b.Lang, first, reason)
		default:
			fmt.Fprintf(&sb, "%d. %s `%s`: exit code %d", i+1, b.Lang, first, r.ReturnCode)
			if out := strings.TrimSpace(r.Stdout); out != "" {
				line, _, _ := strings.Cut(out, "\n")
				if len(line) > 80 {
					line = line[:80] + "…"
				}
				fmt.Fprintf(&sb, ", output starts %q", line)
			}
			sb.WriteString("\n")
			for _, f := range r.Files {
				if p, err := file.DecodeID(f.FileID); err == nil {
					outputs = append(outputs, p)
				}
			}
		}
	}
	if len(outputs) > 0 {
		fmt.Fprintf(&sb, "Files saved to /mnt/user-data/outputs/: %s\n", strings.Join(outputs, ", "))
	} else {
		sb.WriteString("No files were written to $OUTPUT_DIR; files written elsewhere stay in the container's workspace.\n")
	}
	return strings.TrimRight(sb.String(), "\n")
}

func result(content []wire.ContentBlock) *messages.StepResult {
	stop := wire.StopEndTurn
	out := 0
	for _, b := range content {
		if b.Type == wire.BlockToolUse {
			stop = wire.StopToolUse
		}
		out += (len(b.Text) + len(b.Input) + 3) / 4
	}
	return &messages.StepResult{Content: content, StopReason: stop, Usage: wire.Usage{OutputTokens: out}}
}

// Step answers at once.
func (m *Model) Step(ctx context.Context, req messages.StepRequest) (*messages.StepResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	return result(plan(req)), nil
}

// StreamStep answers at once, reporting each block as start, delta, stop.
func (m *Model) StreamStep(ctx context.Context, req messages.StepRequest, emit func(messages.StepEvent) error) (*messages.StepResult, error) {
	res, err := m.Step(ctx, req)
	if err != nil {
		return nil, err
	}
	for i, b := range res.Content {
		start := b
		var d wire.BlockDelta
		if b.Type == wire.BlockText {
			start.Text = ""
			d = wire.BlockDelta{Type: wire.DeltaText, Text: b.Text}
		} else {
			start.Input = nil
			d = wire.BlockDelta{Type: wire.DeltaInputJSON, PartialJSON: string(b.Input)}
		}
		for _, ev := range []messages.StepEvent{
			{Kind: messages.StepBlockStart, Index: i, Block: start},
			{Kind: messages.StepBlockDelta, Index: i, Delta: d},
			{Kind: messages.StepBlockStop, Index: i},
		} {
			if err := emit(ev); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

package sandboxtools

import (
	"context"
	"encoding/json"
	"errors"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"threadbox/app/messages"
	"threadbox/domain/file"
	"threadbox/domain/sandbox"
)

// editInput is the input of edit_file.
type editInput struct {
	Path   *string `json:"path"`
	OldStr *string `json:"old_str"`
	NewStr *string `json:"new_str"`
}

// EditResult is the content of an edit_file result.
type EditResult struct {
	Type string `json:"type"`
	Path string `json:"path"`
	// Match is how old_str was found: exact, whitespace (differing only in
	// whitespace) or near (the most similar lines above the threshold).
	Match      MatchKind `json:"match"`
	Similarity float64   `json:"similarity"`
	// Replaced is the text that was replaced, as it was in the file.
	Replaced  string `json:"replaced"`
	StartLine int    `json:"start_line"`
	OldLines  int    `json:"old_lines"`
	NewLines  int    `json:"new_lines"`
}

func (e *Executor) editFile(ctx context.Context, call messages.ToolCall) (any, error) {
	var in editInput
	if err := decode(call.Input, &in); err != nil {
		return nil, err
	}
	for name, v := range map[string]*string{"path": in.Path, "old_str": in.OldStr, "new_str": in.NewStr} {
		if v == nil {
			return nil, invalidInput("Invalid input: '%s' is required.", name)
		}
	}
	if *in.OldStr == "" {
		return nil, invalidInput("Invalid input: 'old_str' must not be empty.")
	}
	loc, err := e.cfg.Mounts.ResolveWrite(*in.Path)
	if err != nil {
		return nil, invalidInput("%s", err.Error())
	}
	abs := loc.Path
	if e.files == nil {
		return nil, fail(messages.CodeUnavailable, messages.NotConfiguredMessage)
	}
	b, err := e.files.ReadFile(ctx, call.ContainerID, abs, e.cfg.MaxFileBytes+1)
	switch {
	case errors.Is(err, file.ErrNotFound):
		return nil, fail(messages.CodeFileNotFound, "File not found: %s", abs)
	case errors.Is(err, file.ErrTooLarge) || (err == nil && int64(len(b)) > e.cfg.MaxFileBytes):
		return nil, invalidInput("File %s is larger than %d bytes; edit it with sandbox_bash.", abs, e.cfg.MaxFileBytes)
	case err != nil:
		return nil, fail(messages.CodeUnavailable, "File %s could not be read: %s", abs, messages.Explain(e.cfg.Log, err))
	}
	if !utf8.Valid(b) || slices.Contains(b, 0) {
		return nil, invalidInput("File %s is not a text file.", abs)
	}
	content := string(b)
	m, err := FindMatch(content, *in.OldStr, e.cfg.NearThreshold)
	if err != nil {
		return nil, invalidInput("%s in %s.", err.Error(), abs)
	}
	updated := content[:m.Start] + *in.NewStr + content[m.End:]
	if err := e.files.WriteFile(ctx, call.ContainerID, abs, []byte(updated)); err != nil {
		return nil, fail(messages.CodeUnavailable, "File %s could not be written: %s", abs, messages.Explain(e.cfg.Log, err))
	}
	replaced := content[m.Start:m.End]
	return EditResult{
		Type: "edit_file_result", Path: abs, Match: m.Kind, Similarity: roundTo(m.Similarity, 3),
		Replaced:  replaced,
		StartLine: strings.Count(content[:m.Start], "\n") + 1,
		OldLines:  strings.Count(replaced, "\n") + 1,
		NewLines:  strings.Count(*in.NewStr, "\n") + 1,
	}, nil
}

func roundTo(f float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(f*p+0.5)) / p
}

// bslInput is the input of bsl_check.
type bslInput struct {
	Path *string `json:"path"`
}

// BSLUnavailable is the explanation of bsl_check in an image without
// bsl-language-server.
const BSLUnavailable = "bsl_check is unavailable: bsl-language-server is not installed in this sandbox image. " +
	"An operator can add it to the image (see docs/sandbox-tools.md)."

// bslScript runs bsl-language-server's analysis of $2 (a file or a folder)
// with the JSON reporter and prints the report; exit 127 when the launcher
// ($1) is missing.
const bslScript = `set -u
launcher="$1"; src="$2"
command -v "$launcher" >/dev/null 2>&1 || exit 127
out=$(mktemp -d); work="$src"
if [ -f "$src" ]; then work=$(mktemp -d); cp "$src" "$work/"; fi
"$launcher" --analyze --srcDir "$work" --reporter json --outputDir "$out" >&2 || true
cat "$out"/*.json 2>/dev/null`

// BSLResult is the content of a bsl_check result.
type BSLResult struct {
	Type        string          `json:"type"`
	Path        string          `json:"path"`
	Diagnostics json.RawMessage `json:"diagnostics"`
	Count       int             `json:"count"`
}

func (e *Executor) bslCheck(ctx context.Context, call messages.ToolCall) (any, error) {
	var in bslInput
	if err := decode(call.Input, &in); err != nil {
		return nil, err
	}
	if in.Path == nil || *in.Path == "" {
		return nil, invalidInput("Invalid input: 'path' is required.")
	}
	loc, err := e.cfg.Mounts.Resolve(*in.Path)
	if err != nil {
		return nil, invalidInput("%s", err.Error())
	}
	ext := strings.ToLower(path.Ext(loc.Path))
	res, err := e.sb.Exec(ctx, call.ContainerID, sandbox.Command{
		Args:      []string{"bash", "-c", bslScript, "bsl_check", e.cfg.BSLCommand, loc.Path},
		Env:       call.Env,
		Timeout:   DefaultBSLTimeout,
		MaxOutput: e.cfg.MaxOutput,
	})
	if err != nil {
		return nil, err
	}
	if res.ExitCode == 127 {
		return nil, fail(messages.CodeUnavailable, "%s", BSLUnavailable)
	}
	if ext != "" && ext != ".bsl" && ext != ".os" {
		return nil, invalidInput("bsl_check takes a .bsl or .os file or a configuration folder, not %s.", loc.Path)
	}
	report := strings.TrimSpace(string(res.Stdout))
	if report == "" {
		return nil, fail(messages.CodeUnavailable, "bsl-language-server produced no report for %s: %s", loc.Path, messages.CapOutput(res.Stderr, res.StderrTruncated, 4096))
	}
	diags, n := bslDiagnostics([]byte(report))
	return BSLResult{Type: "bsl_check_result", Path: loc.Path, Diagnostics: diags, Count: n}, nil
}

// bslDiagnostics flattens the JSON reporter's fileinfos into a list of
// {file, range, severity, code, message} objects; an unknown shape is
// returned as is.
func bslDiagnostics(report []byte) (json.RawMessage, int) {
	var r struct {
		FileInfos []struct {
			Path        string `json:"path"`
			Diagnostics []struct {
				Range    json.RawMessage `json:"range"`
				Severity any             `json:"severity"`
				Code     any             `json:"code"`
				Message  string          `json:"message"`
			} `json:"diagnostics"`
		} `json:"fileinfos"`
	}
	if err := json.Unmarshal(report, &r); err != nil || r.FileInfos == nil {
		if json.Valid(report) {
			return report, 0
		}
		b, _ := json.Marshal(string(report))
		return b, 0
	}
	type diag struct {
		File     string          `json:"file"`
		Range    json.RawMessage `json:"range,omitempty"`
		Severity any             `json:"severity,omitempty"`
		Code     any             `json:"code,omitempty"`
		Message  string          `json:"message"`
	}
	out := []diag{}
	for _, fi := range r.FileInfos {
		for _, d := range fi.Diagnostics {
			out = append(out, diag{File: fi.Path, Range: d.Range, Severity: d.Severity, Code: d.Code, Message: d.Message})
		}
	}
	b, _ := json.Marshal(out)
	return b, len(out)
}

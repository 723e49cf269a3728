package tools

import (
	"context"
	"encoding/json"
	"path"
	"strings"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/sandbox"
)

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

// bslCheck runs a bsl_check call.
func (e *Executor) bslCheck(ctx context.Context, call messages.ToolCall, in bslInput) (any, error) {
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
		return nil, refuse(wire.CodeUnavailable, "%s", BSLUnavailable)
	}
	if ext != "" && ext != ".bsl" && ext != ".os" {
		return nil, invalidInput("bsl_check takes a .bsl or .os file or a configuration folder, not %s.", loc.Path)
	}
	report := strings.TrimSpace(string(res.Stdout))
	if report == "" {
		return nil, refuse(wire.CodeUnavailable, "bsl-language-server produced no report for %s: %s", loc.Path, messages.CapOutput(res.Stderr, res.StderrTruncated, 4096))
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

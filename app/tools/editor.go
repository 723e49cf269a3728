package tools

import (
	"context"
	"errors"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/file"
)

// The editor is one for both tool families: text_editor_code_execution
// (view, create, str_replace with the exact text, insert) and edit_file
// (a replacement found exactly, ignoring whitespace, or by near match,
// match.go). Both resolve paths with the mount table, read and write
// files host-side through the Files port within Config.FileOpTimeout, and
// take only text files up to Config.MaxFileBytes.

// edit is one editor operation on one path.
type edit struct {
	e         *Executor
	ctx       context.Context
	container string
	given     string // the path as the model gave it
	abs       string // the clean absolute sandbox path, once resolved
	bash      string // the tool the editor sends the model to for files it does not take
}

// newEdit starts an operation of the tool bashTool's family on the path
// given, bounded by Config.FileOpTimeout.
func (e *Executor) newEdit(ctx context.Context, call messages.ToolCall, given, bashTool string) (*edit, context.CancelFunc) {
	opCtx, cancel := context.WithTimeout(ctx, e.cfg.FileOpTimeout)
	return &edit{e: e, ctx: opCtx, container: call.ContainerID, given: given, bash: bashTool}, cancel
}

// failure turns the error of an operation into the tool's error: the
// operation's own refusals as they are, the file jail's and the mount
// table's refusals as invalid input, a missing file as file_not_found.
func (ed *edit) failure(ctx context.Context, err error) error {
	var te *toolError
	var me *file.MountError
	switch {
	case errors.As(err, &te):
		return te
	case errors.As(err, &me):
		return invalidInput("%s", me.Error())
	case errors.Is(err, file.ErrNotFound):
		return refuse(wire.CodeFileNotFound, "File not found: %s", ed.abs)
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return refuse(wire.CodeExecutionTimeExceeded, "The file operation timed out after %ss.", seconds(ed.e.cfg.FileOpTimeout))
	case errors.Is(err, file.ErrTooLarge):
		return refuse(wire.CodeUnavailable, "Writing %s failed: the container's disk is full.", ed.abs)
	case errors.Is(err, file.ErrSymlink):
		return invalidInput("Path %s is a symbolic link, which the editor does not follow.", ed.abs)
	case errors.Is(err, file.ErrNotRegular):
		return invalidInput("Path %s is not a regular file.", ed.abs)
	case errors.Is(err, file.ErrReadOnly):
		return invalidInput("Path '%s' is in a read-only mount", ed.given)
	}
	return refuse(wire.CodeUnavailable, "The file operation on %s failed (%s).", ed.abs, messages.Explain(ed.e.cfg.Log, err))
}

// resolve checks the path against the mount table, for writing or reading.
func (ed *edit) resolve(write bool) error {
	t := ed.e.cfg.Mounts
	var (
		loc file.Location
		err error
	)
	if write {
		loc, err = t.ResolveWrite(ed.given)
	} else {
		loc, err = t.Resolve(ed.given)
	}
	if err != nil {
		return err
	}
	ed.abs = loc.Path
	return nil
}

// readText reads the file as text.
func (ed *edit) readText() (string, error) {
	fi, err := ed.e.files.Stat(ed.ctx, ed.container, ed.abs)
	if err != nil {
		return "", err
	}
	if fi.Dir {
		return "", invalidInput("Path %s is a directory.", ed.abs)
	}
	tooLarge := invalidInput("File %s is larger than %d bytes; use %s to work with it.", ed.abs, ed.e.cfg.MaxFileBytes, ed.bash)
	if fi.Size > ed.e.cfg.MaxFileBytes {
		return "", tooLarge
	}
	b, err := ed.e.files.ReadFile(ed.ctx, ed.container, ed.abs, ed.e.cfg.MaxFileBytes)
	if errors.Is(err, file.ErrTooLarge) || int64(len(b)) > ed.e.cfg.MaxFileBytes {
		return "", tooLarge
	}
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) || slices.Contains(b, 0) {
		return "", invalidInput("File %s is not a text file; use %s to inspect it.", ed.abs, ed.bash)
	}
	return string(b), nil
}

// write replaces the file's content.
func (ed *edit) write(text string) error {
	return ed.e.files.WriteFile(ed.ctx, ed.container, ed.abs, []byte(text))
}

// replace reads the file, finds the place old stands for with find and
// writes the file with that place replaced by newStr; it returns the
// text as it was and the place.
func (ed *edit) replace(old, newStr string, find func(text, old string) (Match, error)) (string, Match, error) {
	if err := ed.resolve(true); err != nil {
		return "", Match{}, err
	}
	text, err := ed.readText()
	if err != nil {
		return "", Match{}, err
	}
	m, err := find(text, old)
	if err != nil {
		return "", Match{}, err
	}
	if err := ed.write(text[:m.Start] + newStr + text[m.End:]); err != nil {
		return "", Match{}, err
	}
	return text, m, nil
}

// editorInput is the input of text_editor_code_execution.
type editorInput struct {
	Command    *string `json:"command"`
	Path       *string `json:"path"`
	ViewRange  []int   `json:"view_range"`
	FileText   *string `json:"file_text"`
	OldStr     *string `json:"old_str"`
	NewStr     *string `json:"new_str"`
	InsertLine *int    `json:"insert_line"`
	InsertText *string `json:"insert_text"`
}

// editor runs a text_editor_code_execution call.
func (e *Executor) editor(ctx context.Context, call messages.ToolCall, in editorInput) (*wire.ToolResult, error) {
	if in.Command == nil {
		return nil, invalidInput("Invalid input: 'command' is required.")
	}
	if in.Path == nil || *in.Path == "" {
		return nil, invalidInput("Invalid input: 'path' is required.")
	}
	ed, cancel := e.newEdit(ctx, call, *in.Path, wire.SubToolBash)
	defer cancel()
	var (
		r   *wire.ToolResult
		err error
	)
	switch *in.Command {
	case "view":
		r, err = ed.view(in)
	case "create":
		r, err = ed.create(in)
	case "str_replace":
		r, err = ed.strReplace(in)
	case "insert":
		r, err = ed.insert(in)
	default:
		err = invalidInput("Invalid input: unknown command %q; use view, create, str_replace or insert.", *in.Command)
	}
	if err != nil {
		return nil, ed.failure(ctx, err)
	}
	return r, nil
}

// splitLines splits text into lines; a final newline does not start a line.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func (ed *edit) view(in editorInput) (*wire.ToolResult, error) {
	if err := ed.resolve(false); err != nil {
		return nil, err
	}
	fi, err := ed.e.files.Stat(ed.ctx, ed.container, ed.abs)
	if err != nil {
		return nil, err
	}
	if fi.Dir {
		if in.ViewRange != nil {
			return nil, invalidInput("Invalid input: 'view_range' is not allowed when viewing a directory.")
		}
		return ed.list()
	}
	text, err := ed.readText()
	if err != nil {
		return nil, err
	}
	lines := splitLines(text)
	total := len(lines)
	start, end := 1, total
	if in.ViewRange != nil {
		if len(in.ViewRange) != 2 {
			return nil, invalidInput("Invalid input: 'view_range' must be [start, end].")
		}
		start, end = in.ViewRange[0], in.ViewRange[1]
		if start < 1 || (start > total && !(total == 0 && start == 1)) {
			return nil, invalidInput("Invalid 'view_range' %v: start must be between 1 and %d, the file's number of lines.", in.ViewRange, total)
		}
		if end == -1 || end > total {
			end = total
		}
		if end < start && !(total == 0) {
			return nil, invalidInput("Invalid 'view_range' %v: end must be at least start, or -1.", in.ViewRange)
		}
	}
	shown := []string{}
	if total > 0 {
		shown = lines[start-1 : end]
	}
	return ed.shown(shown, start, total), nil
}

// shown is a view result showing lines from line start of total.
func (ed *edit) shown(lines []string, start, total int) *wire.ToolResult {
	return &wire.ToolResult{
		Type:        wire.ResultEditorView,
		FileType:    "text",
		FileContent: messages.CapOutput([]byte(strings.Join(lines, "\n")), false, ed.e.cfg.MaxOutput),
		NumLines:    len(lines),
		StartLine:   start,
		TotalLines:  total,
	}
}

// list shows a directory: one entry a line, folders ending in "/".
func (ed *edit) list() (*wire.ToolResult, error) {
	entries, err := ed.e.files.List(ed.ctx, ed.container, ed.abs)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, fi := range entries {
		n := path.Base(fi.Rel)
		if fi.Dir {
			n += "/"
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return ed.shown(names, 1, len(names)), nil
}

func (ed *edit) create(in editorInput) (*wire.ToolResult, error) {
	if in.FileText == nil {
		return nil, invalidInput("Invalid input: 'file_text' is required for create.")
	}
	if err := ed.resolve(true); err != nil {
		return nil, err
	}
	exists := false
	fi, err := ed.e.files.Stat(ed.ctx, ed.container, ed.abs)
	switch {
	case err == nil && fi.Dir:
		return nil, invalidInput("Path %s is a directory.", ed.abs)
	case err == nil:
		exists = true
	case !errors.Is(err, file.ErrNotFound):
		return nil, err
	}
	if err := ed.write(*in.FileText); err != nil {
		return nil, err
	}
	return &wire.ToolResult{Type: wire.ResultEditorCreate, IsFileUpdate: exists}, nil
}

// strReplace replaces the one exact occurrence of old_str.
func (ed *edit) strReplace(in editorInput) (*wire.ToolResult, error) {
	if in.OldStr == nil || *in.OldStr == "" {
		return nil, invalidInput("Invalid input: 'old_str' is required for str_replace and must not be empty.")
	}
	newStr := ""
	if in.NewStr != nil {
		newStr = *in.NewStr
	}
	text, m, err := ed.replace(*in.OldStr, newStr, func(text, old string) (Match, error) {
		m, me := exactMatch(text, old)
		switch {
		case me == nil:
			return m, nil
		case me.Ambiguous:
			return m, invalidInput("No replacement was performed: old_str occurs %d times in %s; it must occur exactly once.", me.Count, ed.abs)
		}
		return m, invalidInput("No replacement was performed: old_str did not appear verbatim in %s.", ed.abs)
	})
	if err != nil {
		return nil, err
	}
	// The diff covers the whole lines the replaced text touched.
	at := m.Start
	updated := text[:at] + newStr + text[m.End:]
	lineStart := strings.LastIndexByte(text[:at], '\n') + 1
	oldLines, newLines := diffRegions(text[lineStart:m.End], updated[lineStart:at+len(newStr)], text[m.End:])
	startLine := strings.Count(text[:lineStart], "\n") + 1
	r := &wire.ToolResult{
		Type:     wire.ResultEditorStrReplace,
		OldStart: startLine, OldLines: len(oldLines),
		NewStart: startLine, NewLines: len(newLines),
		Lines: []string{},
	}
	for _, l := range oldLines {
		r.Lines = append(r.Lines, "-"+l)
	}
	for _, l := range newLines {
		r.Lines = append(r.Lines, "+"+l)
	}
	return r, nil
}

// diffRegions returns the old and new whole lines of a replacement: oldR
// and newR run from the start of the first touched line to the end of the
// replaced text, and suffix is the text after it.
func diffRegions(oldR, newR, suffix string) (oldLines, newLines []string) {
	if strings.HasSuffix(oldR, "\n") && (newR == "" || strings.HasSuffix(newR, "\n")) {
		// Whole lines were replaced: the next line is untouched.
		oldLines = strings.Split(strings.TrimSuffix(oldR, "\n"), "\n")
		if newR != "" {
			newLines = strings.Split(strings.TrimSuffix(newR, "\n"), "\n")
		}
		return oldLines, newLines
	}
	rest, _, _ := strings.Cut(suffix, "\n")
	return strings.Split(oldR+rest, "\n"), strings.Split(newR+rest, "\n")
}

func (ed *edit) insert(in editorInput) (*wire.ToolResult, error) {
	if in.InsertLine == nil {
		return nil, invalidInput("Invalid input: 'insert_line' is required for insert.")
	}
	if in.InsertText == nil {
		return nil, invalidInput("Invalid input: 'insert_text' is required for insert.")
	}
	if err := ed.resolve(true); err != nil {
		return nil, err
	}
	text, err := ed.readText()
	if err != nil {
		return nil, err
	}
	lines := splitLines(text)
	n := *in.InsertLine
	if n < 0 || n > len(lines) {
		return nil, invalidInput("Invalid 'insert_line' %d: it must be between 0 and %d, the file's number of lines.", n, len(lines))
	}
	added := splitLines(*in.InsertText)
	if *in.InsertText != "" && len(added) == 0 {
		added = []string{""}
	}
	if *in.InsertText == "\n" {
		added = []string{""}
	}
	out := slices.Concat(lines[:n], added, lines[n:])
	updated := strings.Join(out, "\n")
	if strings.HasSuffix(text, "\n") || (text == "" && len(out) > 0) {
		updated += "\n"
	}
	if err := ed.write(updated); err != nil {
		return nil, err
	}
	r := &wire.ToolResult{
		Type:     wire.ResultEditorStrReplace,
		OldStart: n + 1, OldLines: 0,
		NewStart: n + 1, NewLines: len(added),
		Lines: []string{},
	}
	for _, l := range added {
		r.Lines = append(r.Lines, "+"+l)
	}
	return r, nil
}

// editFileInput is the input of edit_file.
type editFileInput struct {
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

// editFile runs an edit_file call: old_str found exactly, else ignoring
// whitespace, else by near match (FindMatch).
func (e *Executor) editFile(ctx context.Context, call messages.ToolCall, in editFileInput) (any, error) {
	for name, v := range map[string]*string{"path": in.Path, "old_str": in.OldStr, "new_str": in.NewStr} {
		if v == nil {
			return nil, invalidInput("Invalid input: '%s' is required.", name)
		}
	}
	if *in.OldStr == "" {
		return nil, invalidInput("Invalid input: 'old_str' must not be empty.")
	}
	if e.files == nil {
		return nil, refuse(wire.CodeUnavailable, "%s", messages.NotConfiguredMessage)
	}
	ed, cancel := e.newEdit(ctx, call, *in.Path, messages.ToolSandboxBash)
	defer cancel()
	text, m, err := ed.replace(*in.OldStr, *in.NewStr, func(text, old string) (Match, error) {
		m, err := FindMatch(text, old, e.cfg.NearThreshold)
		if err != nil {
			return m, invalidInput("%s in %s.", err.Error(), ed.abs)
		}
		return m, nil
	})
	if err != nil {
		return nil, ed.failure(ctx, err)
	}
	replaced := text[m.Start:m.End]
	return EditResult{
		Type: "edit_file_result", Path: ed.abs, Match: m.Kind, Similarity: roundTo(m.Similarity, 3),
		Replaced:  replaced,
		StartLine: strings.Count(text[:m.Start], "\n") + 1,
		OldLines:  strings.Count(replaced, "\n") + 1,
		NewLines:  strings.Count(*in.NewStr, "\n") + 1,
	}, nil
}

// roundTo rounds f to the digits after the point.
func roundTo(f float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(f*p+0.5)) / p
}

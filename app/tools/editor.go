package tools

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"threadbox/app/messages"
	"threadbox/domain/file"
)

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

// editorError is a text-editor failure that becomes an error block.
type editorError struct {
	code string
	msg  string
}

func (e *editorError) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &editorError{messages.CodeInvalidToolInput, fmt.Sprintf(format, args...)}
}

func (e *Executor) editor(ctx context.Context, call messages.ToolCall) *messages.ToolResult {
	fail := func(code, msg string) *messages.ToolResult {
		return messages.ErrorResult(messages.SubToolTextEditor, code, msg)
	}
	if e.files == nil {
		return fail(messages.CodeUnavailable, messages.NotConfiguredMessage)
	}
	var in editorInput
	if err := decodeInput(call.Input, &in); err != nil {
		return fail(messages.CodeInvalidToolInput, err.Error())
	}
	if in.Command == nil {
		return fail(messages.CodeInvalidToolInput, "Invalid input: 'command' is required.")
	}
	if in.Path == nil || *in.Path == "" {
		return fail(messages.CodeInvalidToolInput, "Invalid input: 'path' is required.")
	}
	opCtx, cancel := context.WithTimeout(ctx, e.cfg.FileOpTimeout)
	defer cancel()
	ed := &edit{e: e, ctx: opCtx, container: call.ContainerID, given: *in.Path}
	var (
		r   *messages.ToolResult
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
		err = invalid("Invalid input: unknown command %q; use view, create, str_replace or insert.", *in.Command)
	}
	if err == nil {
		return r
	}
	var ee *editorError
	var me *file.MountError
	switch {
	case errors.As(err, &ee):
		return fail(ee.code, ee.msg)
	case errors.As(err, &me):
		return fail(messages.CodeInvalidToolInput, me.Error())
	case errors.Is(err, file.ErrNotFound):
		return fail(messages.CodeFileNotFound, "File not found: "+ed.abs)
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return fail(messages.CodeExecutionTimeExceeded, fmt.Sprintf("The file operation timed out after %ss.", seconds(e.cfg.FileOpTimeout)))
	case errors.Is(err, file.ErrTooLarge):
		return fail(messages.CodeUnavailable, fmt.Sprintf("Writing %s failed: the container's disk is full.", ed.abs))
	case errors.Is(err, file.ErrSymlink):
		return fail(messages.CodeInvalidToolInput, fmt.Sprintf("Path %s is a symbolic link, which the editor does not follow.", ed.abs))
	case errors.Is(err, file.ErrNotRegular):
		return fail(messages.CodeInvalidToolInput, fmt.Sprintf("Path %s is not a regular file.", ed.abs))
	case errors.Is(err, file.ErrReadOnly):
		return fail(messages.CodeInvalidToolInput, fmt.Sprintf("Path '%s' is in a read-only mount", ed.given))
	}
	return fail(messages.CodeUnavailable, fmt.Sprintf("The file operation on %s failed (%s).", ed.abs, messages.Explain(e.cfg.Log, err)))
}

// edit is one text-editor operation on one path.
type edit struct {
	e         *Executor
	ctx       context.Context
	container string
	given     string // the path as the model gave it
	abs       string // the clean absolute sandbox path, once resolved
}

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
		return "", invalid("Path %s is a directory.", ed.abs)
	}
	tooLarge := invalid("File %s is larger than %d bytes; use bash_code_execution to work with it.", ed.abs, ed.e.cfg.MaxFileBytes)
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
		return "", invalid("File %s is not a text file; use bash_code_execution to inspect it.", ed.abs)
	}
	return string(b), nil
}

// splitLines splits text into lines; a final newline does not start a line.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func (ed *edit) view(in editorInput) (*messages.ToolResult, error) {
	if err := ed.resolve(false); err != nil {
		return nil, err
	}
	fi, err := ed.e.files.Stat(ed.ctx, ed.container, ed.abs)
	if err != nil {
		return nil, err
	}
	if fi.Dir {
		if in.ViewRange != nil {
			return nil, invalid("Invalid input: 'view_range' is not allowed when viewing a directory.")
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
			return nil, invalid("Invalid input: 'view_range' must be [start, end].")
		}
		start, end = in.ViewRange[0], in.ViewRange[1]
		if start < 1 || (start > total && !(total == 0 && start == 1)) {
			return nil, invalid("Invalid 'view_range' %v: start must be between 1 and %d, the file's number of lines.", in.ViewRange, total)
		}
		if end == -1 || end > total {
			end = total
		}
		if end < start && !(total == 0) {
			return nil, invalid("Invalid 'view_range' %v: end must be at least start, or -1.", in.ViewRange)
		}
	}
	shown := []string{}
	if total > 0 {
		shown = lines[start-1 : end]
	}
	return &messages.ToolResult{
		Type:        messages.ResultEditorView,
		FileType:    "text",
		FileContent: messages.CapOutput([]byte(strings.Join(shown, "\n")), false, ed.e.cfg.MaxOutput),
		NumLines:    len(shown),
		StartLine:   start,
		TotalLines:  total,
	}, nil
}

// list shows a directory: one entry a line, folders ending in "/".
func (ed *edit) list() (*messages.ToolResult, error) {
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
	return &messages.ToolResult{
		Type:        messages.ResultEditorView,
		FileType:    "text",
		FileContent: messages.CapOutput([]byte(strings.Join(names, "\n")), false, ed.e.cfg.MaxOutput),
		NumLines:    len(names),
		StartLine:   1,
		TotalLines:  len(names),
	}, nil
}

func (ed *edit) create(in editorInput) (*messages.ToolResult, error) {
	if in.FileText == nil {
		return nil, invalid("Invalid input: 'file_text' is required for create.")
	}
	if err := ed.resolve(true); err != nil {
		return nil, err
	}
	exists := false
	fi, err := ed.e.files.Stat(ed.ctx, ed.container, ed.abs)
	switch {
	case err == nil && fi.Dir:
		return nil, invalid("Path %s is a directory.", ed.abs)
	case err == nil:
		exists = true
	case !errors.Is(err, file.ErrNotFound):
		return nil, err
	}
	if err := ed.e.files.WriteFile(ed.ctx, ed.container, ed.abs, []byte(*in.FileText)); err != nil {
		return nil, err
	}
	return &messages.ToolResult{Type: messages.ResultEditorCreate, IsFileUpdate: exists}, nil
}

func (ed *edit) strReplace(in editorInput) (*messages.ToolResult, error) {
	if in.OldStr == nil || *in.OldStr == "" {
		return nil, invalid("Invalid input: 'old_str' is required for str_replace and must not be empty.")
	}
	newStr := ""
	if in.NewStr != nil {
		newStr = *in.NewStr
	}
	if err := ed.resolve(true); err != nil {
		return nil, err
	}
	text, err := ed.readText()
	if err != nil {
		return nil, err
	}
	switch n := strings.Count(text, *in.OldStr); n {
	case 0:
		return nil, invalid("No replacement was performed: old_str did not appear verbatim in %s.", ed.abs)
	case 1:
	default:
		return nil, invalid("No replacement was performed: old_str occurs %d times in %s; it must occur exactly once.", n, ed.abs)
	}
	at := strings.Index(text, *in.OldStr)
	updated := text[:at] + newStr + text[at+len(*in.OldStr):]
	if err := ed.e.files.WriteFile(ed.ctx, ed.container, ed.abs, []byte(updated)); err != nil {
		return nil, err
	}
	// The diff covers the whole lines the replaced text touched.
	lineStart := strings.LastIndexByte(text[:at], '\n') + 1
	oldLines, newLines := diffRegions(text[lineStart:at+len(*in.OldStr)], updated[lineStart:at+len(newStr)], text[at+len(*in.OldStr):])
	startLine := strings.Count(text[:lineStart], "\n") + 1
	r := &messages.ToolResult{
		Type:     messages.ResultEditorStrReplace,
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

func (ed *edit) insert(in editorInput) (*messages.ToolResult, error) {
	if in.InsertLine == nil {
		return nil, invalid("Invalid input: 'insert_line' is required for insert.")
	}
	if in.InsertText == nil {
		return nil, invalid("Invalid input: 'insert_text' is required for insert.")
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
		return nil, invalid("Invalid 'insert_line' %d: it must be between 0 and %d, the file's number of lines.", n, len(lines))
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
	if err := ed.e.files.WriteFile(ed.ctx, ed.container, ed.abs, []byte(updated)); err != nil {
		return nil, err
	}
	r := &messages.ToolResult{
		Type:     messages.ResultEditorStrReplace,
		OldStart: n + 1, OldLines: 0,
		NewStart: n + 1, NewLines: len(added),
		Lines: []string{},
	}
	for _, l := range added {
		r.Lines = append(r.Lines, "+"+l)
	}
	return r, nil
}

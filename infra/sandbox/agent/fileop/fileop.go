// Package fileop is the file transfer spoken with a threadbox agent that
// holds a container's folders (the kubernetes backend's files sidecar): one
// file operation is one command, `threadbox-agent file '<request JSON>'`,
// run through the ordinary agent protocol, so the protocol itself gains no
// frame type. The command performs the operation with infra/fsroot over the
// folders mounted at their sandbox paths, so the semantics are
// fsroot's: confinement to the mounts, symlinks never followed, atomic
// replace, the write limit and the same error values.
//
// The command's stdout carries, in order: for a write (OpWrite,
// OpWriteExtents and OpSkills), progress lines "+<bytes>\n" (the bytes of
// stdin consumed so far, for the host's flow control); then one JSON line,
// the Reply; then, for an open whose Reply has no error, exactly
// Reply.Info.Size bytes of the file (OpOpen) or only its data extents, its
// holes left out, as infra/sparse's extent stream (OpOpenExtents). Stdin
// carries the bytes of a write (for OpWriteExtents, the file's extent
// stream) as chunks (EncodeChunk) ended by an empty one: a stdin that ends
// without it (the host's reader failed, the host went) is a cut-short
// upload, which stores nothing. The exit status is 0 whenever a Reply was
// written, and 2 when the request was refused unread (ParseRequest): what
// an agent older than an operation answers to it.
package fileop

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"threadbox/domain/file"
	"threadbox/domain/sandbox"
)

// Command is the agent's first argument that selects a file operation.
const Command = "file"

// The operations.
const (
	OpStat        = "stat"         // Info of a regular file or folder
	OpOpen        = "open"         // Info, then the file's bytes
	OpOpenExtents = "open-extents" // Info, then the file's data extents
	OpWalk        = "walk"         // Infos: every regular file under a folder
	OpList        = "list"         // Infos: the entries directly inside a folder
	OpWrite       = "write"        // stdin stored at Path, at most Limit bytes
	// OpWriteExtents stores at Path the file of Size bytes whose extent
	// stream (OpOpenExtents's) stdin carries, its holes kept, at most
	// Limit bytes of data.
	OpWriteExtents = "write-extents"
	OpRemove       = "remove"        // the file at Path
	OpRemovePrefix = "remove-prefix" // Count: files of Mount under Prefix
	// OpSkills makes the skills folder (Path, which must be
	// sandbox.SkillsDir) hold exactly the tree of the tar stream on stdin,
	// at most Limit bytes of files. Uploads and skills are read-only to
	// the code; this is how threadbox writes the skills.
	OpSkills = "skills"
)

// MaxRequest bounds a request's JSON: a path of file.MaxPathLen and a few
// fields fit many times over.
const MaxRequest = 64 << 10

// ProgressEvery is how many bytes of stdin a write consumes between two
// progress lines.
const ProgressEvery = 256 << 10

// Request is one file operation.
type Request struct {
	Op     string `json:"op"`
	Path   string `json:"path,omitempty"`   // absolute sandbox path
	Mount  string `json:"mount,omitempty"`  // OpRemovePrefix: the mount
	Prefix string `json:"prefix,omitempty"` // OpRemovePrefix: the prefix within it
	Limit  int64  `json:"limit,omitempty"`  // OpWrite: at most this many bytes (negative: none); OpWriteExtents: of data
	Size   int64  `json:"size,omitempty"`   // OpWriteExtents: the file's size
}

// Reply is the answer to a Request.
type Reply struct {
	Info  *file.Info  `json:"info,omitempty"`
	Infos []file.Info `json:"infos,omitempty"`
	Count int         `json:"count,omitempty"`
	Data  int64       `json:"data,omitempty"` // OpWriteExtents: the bytes of data stored
	Error *Error      `json:"error,omitempty"`
}

// Error is a failed operation: its message and the file package's error
// values it wrapped, by name, so the host can wrap them again.
type Error struct {
	Message string   `json:"message"`
	Kinds   []string `json:"kinds,omitempty"`
	// MountPath is set for a *file.MountError: the path the table refused.
	MountPath string `json:"mount_path,omitempty"`
}

// kinds names the error values an Error carries across.
var kinds = []struct {
	name string
	err  error
}{
	{"not-found", file.ErrNotFound},
	{"not-regular", file.ErrNotRegular},
	{"symlink", file.ErrSymlink},
	{"too-large", file.ErrTooLarge},
	{"read-only", file.ErrReadOnly},
	{"invalid-rel", file.ErrInvalidRel},
	{"not-dir", file.ErrNotDir},
	{"disk-full", file.ErrDiskFull},
	{"server-disk-full", file.ErrServerDiskFull},
	{"read-only-mount", file.ErrReadOnlyMount},
	{"no-mount", file.ErrNoMount},
}

// EncodeError describes err for the wire.
func EncodeError(err error) *Error {
	e := &Error{Message: err.Error()}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			e.Kinds = append(e.Kinds, k.name)
		}
	}
	var me *file.MountError
	if errors.As(err, &me) {
		e.MountPath = me.Path
	}
	return e
}

// Err returns an error with e's message that wraps the error values e
// names (and a *file.MountError when it carries one); unknown names are
// ignored.
func (e *Error) Err() error {
	out := &remoteError{msg: e.Message}
	for _, name := range e.Kinds {
		for _, k := range kinds {
			if k.name != name {
				continue
			}
			if (k.err == file.ErrReadOnlyMount || k.err == file.ErrNoMount) && e.MountPath != "" {
				out.errs = append(out.errs, &file.MountError{Path: e.MountPath, Err: k.err})
			} else {
				out.errs = append(out.errs, k.err)
			}
		}
	}
	return out
}

// remoteError is an error of the agent's side.
type remoteError struct {
	msg  string
	errs []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.errs }

// ParseRequest decodes and checks a request argument.
func ParseRequest(arg string) (Request, error) {
	var r Request
	if len(arg) > MaxRequest {
		return r, fmt.Errorf("fileop: request of %d bytes", len(arg))
	}
	dec := json.NewDecoder(strings.NewReader(arg))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("fileop: request: %w", err)
	}
	switch r.Op {
	case OpStat, OpOpen, OpOpenExtents, OpWalk, OpList, OpWrite, OpWriteExtents, OpRemove:
		if r.Path == "" {
			return r, fmt.Errorf("fileop: %s without a path", r.Op)
		}
		if r.Size < 0 {
			return r, fmt.Errorf("fileop: %s of size %d", r.Op, r.Size)
		}
	case OpSkills:
		if r.Path != sandbox.SkillsDir {
			return r, fmt.Errorf("fileop: skills at %q, not %s", r.Path, sandbox.SkillsDir)
		}
	case OpRemovePrefix:
		switch file.Mount(r.Mount) {
		case file.Workspace, file.Uploads, file.Outputs, file.Skills:
		default:
			return r, fmt.Errorf("fileop: unknown mount %q", r.Mount)
		}
	default:
		return r, fmt.Errorf("fileop: unknown operation %q", r.Op)
	}
	return r, nil
}

// Args returns the command line of r for the agent binary at agentPath.
func (r Request) Args(agentPath string) ([]string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("fileop: encode: %w", err)
	}
	return []string{agentPath, Command, string(b)}, nil
}

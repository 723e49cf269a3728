package kubernetes

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"threadbox/domain/file"
	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
	"threadbox/infra/sandbox/agent/fileop"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sparse"
)

// containerFiles is the files sidecar of a pod in storage-class mode.
const containerFiles = "files"

// FilesAgentPath is the agent binary in the agent image, which the files
// sidecar runs.
const FilesAgentPath = "/threadbox-agent"

// Life keeps a container's sandbox running for the length of a function
// (app/containers.Service has this method).
type Life interface {
	// Use boots the container's sandbox unless it runs, keeps it from an
	// idle stop while fn runs, and returns fn's error.
	Use(ctx context.Context, containerID string, fn func(ctx context.Context) error) error
}

// Files reads and writes the files of containers whose claims live on the
// cluster's storage (storage-class mode, where threadbox cannot see the
// claim's volume): every operation runs in the pod's files sidecar, a
// container of the pod that mounts the claim's folders at their sandbox
// paths, all writable (uploads and skills stay read-only to the code,
// whose container mounts them read-only), and that runs the agent. An
// operation is one `threadbox-agent file` command there
// (infra/sandbox/agent/fileop), so its semantics and errors are
// infra/fsroot's. A stopped sandbox (an idle stop deletes the pod, the
// claim stays) is booted through Life first, so an upload to an idle
// thread lands on the claim and is there when code runs. It implements
// app/files.Store and the file ports of app/workspace and app/tools.
type Files struct {
	b    *Backend
	life Life
	// TempDir holds an opened file's bytes while the caller reads them
	// (those above MemoryLimit); empty is os.TempDir().
	TempDir string

	mu     sync.Mutex
	synced map[string]string // container id → pod uid and digest of the skills sent

	// writeExtentsOp is the operation CopyFile asks of the target;
	// empty is fileop.OpWriteExtents. Tests name one no agent knows, as
	// an agent older than write-extents answers it.
	writeExtentsOp string
	// openExtentsOp is the operation Open and CopyFile ask of the source;
	// empty is fileop.OpOpenExtents. Tests name one no agent knows, as an
	// agent older than open-extents answers it.
	openExtentsOp string
}

// openExtents is the operation that reads a file as its data extents.
func (f *Files) openExtents() string { return cmp.Or(f.openExtentsOp, fileop.OpOpenExtents) }

// NewFiles returns the file access of b's containers, whose sandboxes life
// keeps running.
func NewFiles(b *Backend, life Life) *Files {
	return &Files{b: b, life: life}
}

// memoryLimit is the size up to which an opened file is held in memory.
const memoryLimit = 1 << 20

// writeWindow is how many bytes of a write may be sent ahead of what the
// sidecar has consumed, which bounds the agent's stdin queue.
const writeWindow = 4 << 20

// stopFiles ends the files sidecar's stream.
func (bx *box) stopFiles() {
	bx.filesMu.Lock()
	defer bx.filesMu.Unlock()
	if bx.filesStop != nil {
		bx.filesStop()
		bx.files, bx.filesStop, bx.filesDone = nil, nil, nil
	}
}

// filesAgent returns the agent of id's files sidecar, attaching to it on
// first use (and again when its stream ended).
func (b *Backend) filesAgent(ctx context.Context, id string) (*agent.Client, error) {
	if b.cfg.HostPathVolumes {
		return nil, fmt.Errorf("kubernetes: files of %s: %w: host path volumes have no files sidecar", id, sandbox.ErrUnsupported)
	}
	bx := b.boxes.Get(id)
	if bx == nil {
		return nil, fmt.Errorf("kubernetes: files of %s: %w: sandbox is not running", id, sandbox.ErrUnavailable)
	}
	bx.filesMu.Lock()
	defer bx.filesMu.Unlock()
	if bx.files != nil {
		select {
		case <-bx.filesDone:
		case <-bx.files.Done():
		default:
			return bx.files, nil
		}
		bx.filesStop()
		bx.files = nil
	}
	var cl *agent.Client
	stop, done, err := b.openStream(id, bx.pod, containerFiles, func(rw io.ReadWriteCloser) {
		cl = boxes.NewAgent(rw)
	})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: files of %s: %w: %w", id, sandbox.ErrUnavailable, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		stop()
		return nil, fmt.Errorf("kubernetes: files sidecar of %s: %w: %w", id, sandbox.ErrUnavailable, err)
	}
	bx.files, bx.filesStop, bx.filesDone = cl, stop, done
	return cl, nil
}

// call is one file operation's outcome: its reply, and for an open the
// file's bytes.
type call struct {
	reply fileop.Reply
	body  io.ReadSeekCloser
}

// do runs req in the files sidecar of containerID, booting the sandbox
// when it is stopped; stdin is a write's bytes.
func (f *Files) do(ctx context.Context, containerID string, req fileop.Request, stdin io.Reader) (call, error) {
	return f.doWith(ctx, containerID, req, stdin, nil)
}

// doWith is do that hands an open-extents' stream to consume, when not
// nil, while the sidecar sends it, instead of keeping it in the call's
// body (spool): consume reads the stream to its end or fails. An open's
// whole bytes are always kept in the body (spool).
func (f *Files) doWith(ctx context.Context, containerID string, req fileop.Request, stdin io.Reader, consume func(r io.Reader, size int64) error) (call, error) {
	var out call
	started := false
	use := func(ctx context.Context) error {
		cl, err := f.b.filesAgent(ctx, containerID)
		if err != nil {
			return err
		}
		started = true
		out, err = f.run(ctx, cl, req, stdin, consume)
		if err != nil && !errors.Is(err, errReply) {
			select {
			case <-cl.Done():
				return fmt.Errorf("kubernetes: %s %s: %w: %w", req.Op, req.Path, sandbox.ErrUnavailable, err)
			default:
			}
		}
		return err
	}
	err := f.life.Use(ctx, containerID, use)
	if !started && errors.Is(err, sandbox.ErrUnavailable) && ctx.Err() == nil {
		// The pod went since its last use (deleted from outside): Use
		// forgot it, so a second one boots a new pod. Nothing was sent.
		err = f.life.Use(ctx, containerID, use)
	}
	if err != nil {
		return call{}, err
	}
	if out.reply.Error != nil {
		return call{}, fmt.Errorf("kubernetes: %s: %w", req.Op, out.reply.Error.Err())
	}
	return out, nil
}

// errReply marks the sidecar's answer being malformed, not the stream
// failing.
var errReply = errors.New("malformed file operation reply")

// errRefused marks a request the sidecar's agent refused unread (exit
// status 2, no reply): an agent image older than the operation.
var errRefused = errors.New("file operation refused by the agent")

// run performs req over cl: starts the command, feeds stdin with flow
// control, reads the progress lines, the reply and an open's bytes (into
// consume when it is not nil, see doWith).
func (f *Files) run(ctx context.Context, cl *agent.Client, req fileop.Request, stdin io.Reader, consume func(r io.Reader, size int64) error) (call, error) {
	args, err := req.Args(FilesAgentPath)
	if err != nil {
		return call{}, err
	}
	pr, pw := io.Pipe()
	defer pr.Close()
	var stderr limitedBuffer
	cmd := sandbox.Command{Args: args, Dir: "/", Output: func(s sandbox.Stream, b []byte) {
		if s == sandbox.Stderr {
			stderr.Write(b)
			return
		}
		_, _ = pw.Write(b) // fails once the reader gave up
	}}
	p, err := cl.Start(ctx, cmd, agent.StartOptions{Stream: true})
	if err != nil {
		return call{}, fmt.Errorf("kubernetes: start file %s: %w", req.Op, err)
	}
	exited := make(chan sandbox.Result, 1)
	go func() {
		res, werr := p.Wait(context.Background())
		if werr != nil {
			pw.CloseWithError(werr)
		} else {
			pw.CloseWithError(io.EOF)
		}
		exited <- res
	}()
	finished := false
	defer func() {
		switch {
		case finished:
		case stdin != nil:
			// Never killed mid-write (that would leave its temporary
			// file): stdin closed without the end mark makes the sidecar
			// drop the write and end, which is waited for, so the next
			// operation finds no trace of it.
			_ = p.CloseStdin()
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = p.Kill()
			}
		default:
			_ = p.Kill()
		}
	}()
	// A caller that goes stops the reading at once.
	defer context.AfterFunc(ctx, func() { pr.CloseWithError(ctx.Err()) })()
	var acked atomic.Int64
	ackc := make(chan struct{}, 1)
	fed := make(chan error, 1)
	if stdin == nil {
		fed <- p.CloseStdin()
	} else {
		go func() { fed <- feed(ctx, p, stdin, &acked, ackc) }()
	}
	br := bufio.NewReaderSize(pr, 64<<10)
	var out call
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			ferr := <-fed
			select {
			case res := <-exited:
				finished = true
				if res.ExitCode == 2 {
					return call{}, fmt.Errorf("kubernetes: file %s: %w (%s)", req.Op, errRefused, bytes.TrimSpace(stderr.Bytes()))
				}
			case <-ctx.Done():
			}
			if ferr != nil && (req.Op == fileop.OpWrite || req.Op == fileop.OpWriteExtents) {
				return call{}, ferr
			}
			return call{}, fmt.Errorf("kubernetes: file %s: no reply (%s): %w", req.Op, bytes.TrimSpace(stderr.Bytes()), err)
		}
		if len(line) > 1 && line[0] == '+' {
			n, perr := strconv.ParseInt(string(line[1:len(line)-1]), 10, 64)
			if perr != nil {
				return call{}, fmt.Errorf("kubernetes: file %s: %w: progress %q", req.Op, errReply, line)
			}
			acked.Store(n)
			select {
			case ackc <- struct{}{}:
			default:
			}
			continue
		}
		if err := json.Unmarshal(line, &out.reply); err != nil {
			return call{}, fmt.Errorf("kubernetes: file %s: %w: %v (%s; is the agent image older than threadbox?)", req.Op, errReply, err, bytes.TrimSpace(stderr.Bytes()))
		}
		break
	}
	if ferr := <-fed; ferr != nil && out.reply.Error == nil {
		return call{}, ferr
	}
	if (req.Op == f.openExtents() || req.Op == fileop.OpOpen) && out.reply.Error == nil {
		if out.reply.Info == nil || out.reply.Info.Size < 0 {
			return call{}, fmt.Errorf("kubernetes: file open: %w: no size", errReply)
		}
		whole := req.Op == fileop.OpOpen
		if consume != nil && !whole {
			if err := consume(br, out.reply.Info.Size); err != nil {
				return call{}, err
			}
		} else {
			body, err := f.spool(br, out.reply.Info.Size, whole)
			if err != nil {
				return call{}, err
			}
			out.body = body
		}
	}
	select {
	case res := <-exited:
		finished = true
		if res.ExitCode != 0 {
			if out.body != nil {
				out.body.Close()
			}
			return call{}, fmt.Errorf("kubernetes: file %s: exit %d: %s", req.Op, res.ExitCode, bytes.TrimSpace(stderr.Bytes()))
		}
	case <-ctx.Done():
		if out.body != nil {
			out.body.Close()
		}
		return call{}, ctx.Err()
	}
	return out, nil
}

// feed sends r as the write's framed stdin (fileop.EncodeChunk), at most
// writeWindow bytes ahead of what the sidecar reported consumed, then the
// end mark. When r fails, stdin is closed without the end mark, so the
// sidecar drops what it received.
func feed(ctx context.Context, p *agent.Process, r io.Reader, acked *atomic.Int64, ackc <-chan struct{}) error {
	buf := make([]byte, 256<<10)
	var sent int64
	for {
		select {
		case <-p.Done():
			return nil // refused early (too large, no such folder): the reply says why
		default:
		}
		for sent-acked.Load() > writeWindow {
			select {
			case <-ackc:
			case <-p.Done():
				return nil // the reply says why
			case <-ctx.Done():
				_ = p.CloseStdin()
				return ctx.Err()
			}
		}
		n, rerr := r.Read(buf)
		if n > 0 {
			if _, err := p.Write(fileop.EncodeChunk(buf[:n])); err != nil {
				return fmt.Errorf("kubernetes: write: %w", err)
			}
			sent += int64(n)
		}
		if errors.Is(rerr, io.EOF) {
			if _, err := p.Write(fileop.EncodeChunk(nil)); err != nil {
				return fmt.Errorf("kubernetes: write: %w", err)
			}
			return p.CloseStdin()
		}
		if rerr != nil {
			_ = p.CloseStdin()
			return rerr
		}
	}
}

// spool reads a file of size bytes from r into memory or an unlinked
// temporary file, ready to read from the start: its data extents
// (sparse.Read), or with whole the bytes of a file sent whole (an open
// of an agent older than open-extents), its holes as zeros. The
// temporary file gets only what was sent: a sparse file of the pod sent
// by its extents takes no more of threadbox's disk than it holds.
func (f *Files) spool(r io.Reader, size int64, whole bool) (io.ReadSeekCloser, error) {
	fill := func(w io.WriterAt) error { return sparse.Read(r, size, w) }
	if whole {
		fill = func(w io.WriterAt) error {
			n, err := io.Copy(io.NewOffsetWriter(w, 0), io.LimitReader(r, size))
			if err == nil && n != size {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	if size <= memoryLimit {
		b := make([]byte, size)
		if err := fill(byteWriterAt(b)); err != nil {
			return nil, fmt.Errorf("kubernetes: read file: %w", err)
		}
		return nopCloser{bytes.NewReader(b)}, nil
	}
	tmp, err := os.CreateTemp(f.TempDir, "threadbox-k8s-file-*")
	if err != nil {
		return nil, fmt.Errorf("kubernetes: read file: %w", err)
	}
	_ = os.Remove(tmp.Name())
	err = fill(tmp)
	if err == nil {
		err = tmp.Truncate(size)
	}
	if err == nil {
		_, err = tmp.Seek(0, io.SeekStart)
	}
	if err != nil {
		tmp.Close()
		return nil, fmt.Errorf("kubernetes: read file: %w", err)
	}
	return tmp, nil
}

type nopCloser struct{ *bytes.Reader }

// byteWriterAt writes into a byte slice of fixed length.
type byteWriterAt []byte

func (b byteWriterAt) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(b)) || int64(len(p)) > int64(len(b))-off {
		return 0, fmt.Errorf("kubernetes: read file: %d bytes at %d of %d", len(p), off, len(b))
	}
	return copy(b[off:], p), nil
}

func (nopCloser) Close() error { return nil }

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *limitedBuffer) Write(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := 4<<10 - l.buf.Len(); room > 0 {
		l.buf.Write(b[:min(len(b), room)])
	}
}

func (l *limitedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes())
}

// Stat describes the regular file or folder at sandboxPath.
func (f *Files) Stat(ctx context.Context, containerID, sandboxPath string) (file.Info, error) {
	c, err := f.do(ctx, containerID, fileop.Request{Op: fileop.OpStat, Path: sandboxPath}, nil)
	if err != nil {
		return file.Info{}, err
	}
	if c.reply.Info == nil {
		return file.Info{}, fmt.Errorf("kubernetes: stat %s: %w", sandboxPath, errReply)
	}
	return *c.reply.Info, nil
}

// Open opens the regular file at sandboxPath: its data is read from the
// pod at once and kept (in memory, or in an unlinked file of TempDir,
// holes and all) until Close. A pod whose agent image is older than
// open-extents refuses it, and the file is then read whole (open), its
// holes as zeros.
func (f *Files) Open(ctx context.Context, containerID, sandboxPath string) (io.ReadSeekCloser, file.Info, error) {
	c, err := f.do(ctx, containerID, fileop.Request{Op: f.openExtents(), Path: sandboxPath}, nil)
	if errors.Is(err, errRefused) {
		c, err = f.do(ctx, containerID, fileop.Request{Op: fileop.OpOpen, Path: sandboxPath}, nil)
	}
	if err != nil {
		return nil, file.Info{}, err
	}
	return c.body, *c.reply.Info, nil
}

// ReadFile returns the whole regular file at sandboxPath; one larger than
// limit bytes fails with file.ErrTooLarge.
func (f *Files) ReadFile(ctx context.Context, containerID, sandboxPath string, limit int64) ([]byte, error) {
	info, err := f.Stat(ctx, containerID, sandboxPath)
	if err != nil {
		return nil, err
	}
	if info.Dir {
		return nil, fmt.Errorf("kubernetes: read %s: %w", sandboxPath, file.ErrNotRegular)
	}
	if info.Size > limit {
		return nil, fmt.Errorf("kubernetes: read %s: %d bytes: %w", sandboxPath, info.Size, file.ErrTooLarge)
	}
	rc, info, err := f.Open(ctx, containerID, sandboxPath)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if info.Size > limit {
		return nil, fmt.Errorf("kubernetes: read %s: %d bytes: %w", sandboxPath, info.Size, file.ErrTooLarge)
	}
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: read %s: %w", sandboxPath, err)
	}
	return b, nil
}

// Walk returns every regular file under the folder at sandboxPath; Info.Rel
// is relative to the mount.
func (f *Files) Walk(ctx context.Context, containerID, sandboxPath string) ([]file.Info, error) {
	c, err := f.do(ctx, containerID, fileop.Request{Op: fileop.OpWalk, Path: sandboxPath}, nil)
	return c.reply.Infos, err
}

// List returns the regular files and folders directly inside the folder at
// sandboxPath.
func (f *Files) List(ctx context.Context, containerID, sandboxPath string) ([]file.Info, error) {
	c, err := f.do(ctx, containerID, fileop.Request{Op: fileop.OpList, Path: sandboxPath}, nil)
	return c.reply.Infos, err
}

// Write stores r at sandboxPath atomically, at most limit bytes (negative:
// no limit), creating missing parents. When r fails, nothing is stored.
func (f *Files) Write(ctx context.Context, containerID, sandboxPath string, r io.Reader, limit int64) (file.Info, error) {
	c, err := f.do(ctx, containerID, fileop.Request{Op: fileop.OpWrite, Path: sandboxPath, Limit: limit}, r)
	if err != nil {
		return file.Info{}, err
	}
	if c.reply.Info == nil {
		return file.Info{}, fmt.Errorf("kubernetes: write %s: %w", sandboxPath, errReply)
	}
	return *c.reply.Info, nil
}

// CopyFile copies the regular file at sandboxPath of container from to the
// same path of container to, at most limit bytes of data (negative: no
// limit), and returns the copy and the bytes of data it stores. The copy
// goes through both pods by its data alone: the source's extent stream
// (fileop.OpOpenExtents) is fed as it arrives to the target's
// fileop.OpWriteExtents, so the copy keeps the file's holes and threadbox
// keeps none of it on its disk. A target whose agent image is older than
// that operation gets the file whole (Write), holes written as zeros; so
// does every target when the source's agent is older than open-extents
// (the file is then read whole too, see Open).
func (f *Files) CopyFile(ctx context.Context, from, to, sandboxPath string, limit int64) (file.Info, int64, error) {
	if from == to {
		return f.copyWhole(ctx, from, to, sandboxPath, limit)
	}
	var (
		info    file.Info
		data    int64
		written bool
		target  error // the target's failure, kept from the source's Use
	)
	consume := func(r io.Reader, size int64) error {
		src := &sourceReader{r: r}
		op := cmp.Or(f.writeExtentsOp, fileop.OpWriteExtents)
		c, err := f.do(ctx, to, fileop.Request{Op: op, Path: sandboxPath, Size: size, Limit: limit}, src)
		if serr := src.failed(); serr != nil {
			return serr // the source's stream failed
		}
		if err != nil {
			target = err
			return errTarget
		}
		if c.reply.Info == nil {
			target = fmt.Errorf("kubernetes: copy %s: %w", sandboxPath, errReply)
			return errTarget
		}
		info, data, written = *c.reply.Info, c.reply.Data, true
		return nil
	}
	_, err := f.doWith(ctx, from, fileop.Request{Op: f.openExtents(), Path: sandboxPath}, nil, consume)
	switch {
	case errors.Is(target, errRefused):
		return f.copyWhole(ctx, from, to, sandboxPath, limit)
	case target != nil:
		return file.Info{}, 0, target
	case errors.Is(err, errRefused) && !written:
		// The source's agent refused open-extents before any of the
		// file was sent: the target never ran.
		return f.copyWhole(ctx, from, to, sandboxPath, limit)
	case err != nil && !written:
		return file.Info{}, 0, err
	}
	// A source whose sidecar failed only after its whole stream reached
	// the copy still gave the copy all of it.
	return info, data, nil
}

// copyWhole copies the file through threadbox whole: read by its data into
// the spool (Open), written with its holes as zeros (Write).
func (f *Files) copyWhole(ctx context.Context, from, to, sandboxPath string, limit int64) (file.Info, int64, error) {
	r, _, err := f.Open(ctx, from, sandboxPath)
	if err != nil {
		return file.Info{}, 0, err
	}
	defer r.Close()
	info, err := f.Write(ctx, to, sandboxPath, r, limit)
	if err != nil {
		return file.Info{}, 0, err
	}
	return info, info.Size, nil
}

// errTarget ends the source's stream of a copy whose target failed.
var errTarget = errors.New("kubernetes: the copy's target failed")

// sourceReader reads a copy's source stream for the target's write and
// keeps a failure of it: the target sees only that its input failed, so
// that its sandbox is not taken for the one at fault.
type sourceReader struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		return n, errors.New("kubernetes: the copy's source failed")
	}
	return n, err
}

// failed returns the source stream's failure, if it failed.
func (s *sourceReader) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// SyncFile answers errors.ErrUnsupported: the pods' volumes are synced by
// their own storage, which threadbox does not reach.
func (f *Files) SyncFile(context.Context, string, string) error {
	return fmt.Errorf("kubernetes: sync a pod's file: %w", errors.ErrUnsupported)
}

// WriteFile creates or replaces the file at sandboxPath atomically.
func (f *Files) WriteFile(ctx context.Context, containerID, sandboxPath string, data []byte) error {
	_, err := f.Write(ctx, containerID, sandboxPath, bytes.NewReader(data), int64(len(data)))
	return err
}

// Remove deletes the file at sandboxPath (a symlink itself, never its
// target).
func (f *Files) Remove(ctx context.Context, containerID, sandboxPath string) error {
	_, err := f.do(ctx, containerID, fileop.Request{Op: fileop.OpRemove, Path: sandboxPath}, nil)
	return err
}

// RemovePrefix deletes the regular files of mount m whose path within the
// mount starts with prefix, and returns how many.
func (f *Files) RemovePrefix(ctx context.Context, containerID string, m file.Mount, prefix string) (int, error) {
	c, err := f.do(ctx, containerID, fileop.Request{Op: fileop.OpRemovePrefix, Mount: string(m), Prefix: prefix}, nil)
	return c.reply.Count, err
}

// SyncSkills makes the container's skills folder hold exactly the tree of
// the host folder dir (threadbox's copy, which infra/skillfs keeps), at
// most limit bytes of files (negative: no limit). A tree already sent to
// the running pod is not sent again.
func (f *Files) SyncSkills(ctx context.Context, containerID, dir string, limit int64) error {
	sum, err := treeDigest(dir)
	if err != nil {
		return fmt.Errorf("kubernetes: skills of %s: %w", containerID, err)
	}
	if bx := f.b.boxes.Get(containerID); bx != nil {
		f.mu.Lock()
		same := f.synced[containerID] == bx.uid+":"+sum
		f.mu.Unlock()
		if same {
			return nil
		}
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTree(pw, dir)) }()
	_, err = f.do(ctx, containerID, fileop.Request{Op: fileop.OpSkills, Path: sandbox.SkillsDir, Limit: limit}, pr)
	pr.Close()
	if err != nil {
		return err
	}
	if bx := f.b.boxes.Get(containerID); bx != nil {
		f.mu.Lock()
		if f.synced == nil {
			f.synced = map[string]string{}
		}
		f.synced[containerID] = bx.uid + ":" + sum
		f.mu.Unlock()
	}
	return nil
}

// walkTree calls fn with the slash-separated relative path of every folder
// and regular file under dir, in lexical order; other entries are skipped.
func walkTree(dir string, fn func(rel string, d fs.DirEntry, p string) error) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return filepath.SkipAll
			}
			return err
		}
		if p == dir || !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel), d, p)
	})
}

// treeDigest is the SHA-256 of the names and contents under dir.
func treeDigest(dir string) (string, error) {
	h := sha256.New()
	err := walkTree(dir, func(rel string, d fs.DirEntry, p string) error {
		fmt.Fprintf(h, "%s\x00%v\x00", rel, d.IsDir())
		if d.IsDir() {
			return nil
		}
		fh, err := os.Open(p)
		if err != nil {
			return err
		}
		defer fh.Close()
		n, err := io.Copy(h, fh)
		fmt.Fprintf(h, "\x00%d\x00", n)
		return err
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

// writeTree writes the folders and regular files under dir to w as a tar
// stream.
func writeTree(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := walkTree(dir, func(rel string, d fs.DirEntry, p string) error {
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Name: rel + "/", Typeflag: tar.TypeDir, Mode: 0o755})
		}
		fh, err := os.Open(p)
		if err != nil {
			return err
		}
		defer fh.Close()
		st, err := fh.Stat()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o644, Size: st.Size()}); err != nil {
			return err
		}
		_, err = io.CopyN(tw, fh, st.Size())
		return err
	})
	if err != nil {
		return fmt.Errorf("kubernetes: skills tree: %w", err)
	}
	return tw.Close()
}

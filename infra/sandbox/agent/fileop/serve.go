package fileop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"threadbox/domain/file"
	"threadbox/infra/sparse"
)

// Files is the confined access the agent's side uses (infra/fsroot's
// Containers over the folders at their sandbox paths).
type Files interface {
	Stat(ctx context.Context, containerID, sandboxPath string) (file.Info, error)
	Open(ctx context.Context, containerID, sandboxPath string) (io.ReadSeekCloser, file.Info, error)
	Walk(ctx context.Context, containerID, sandboxPath string) ([]file.Info, error)
	List(ctx context.Context, containerID, sandboxPath string) ([]file.Info, error)
	Write(ctx context.Context, containerID, sandboxPath string, r io.Reader, limit int64) (file.Info, error)
	WriteExtents(ctx context.Context, containerID, sandboxPath string, r io.Reader, size, limit int64) (file.Info, int64, error)
	Remove(ctx context.Context, containerID, sandboxPath string) error
	RemovePrefix(ctx context.Context, containerID string, m file.Mount, prefix string) (int, error)
}

// Serve performs req on fs (OpSkills on the folder skillsDir), reading a
// write's bytes from stdin and writing
// the progress lines, the Reply and an open file's bytes to stdout (the
// package doc). It returns an error only when stdout failed; the
// operation's own failure is in the Reply.
func Serve(ctx context.Context, fs Files, skillsDir string, req Request, stdin io.Reader, stdout io.Writer) error {
	w := bufio.NewWriterSize(stdout, 64<<10)
	var rep Reply
	var body io.ReadCloser
	var err error
	switch req.Op {
	case OpStat:
		var info file.Info
		if info, err = fs.Stat(ctx, "", req.Path); err == nil {
			rep.Info = &info
		}
	case OpOpen, OpOpenExtents:
		var info file.Info
		if body, info, err = fs.Open(ctx, "", req.Path); err == nil {
			rep.Info = &info
		}
	case OpWalk:
		rep.Infos, err = fs.Walk(ctx, "", req.Path)
	case OpList:
		rep.Infos, err = fs.List(ctx, "", req.Path)
	case OpWrite:
		var info file.Info
		in := &progressReader{r: &chunkReader{r: stdin}, w: w}
		if info, err = fs.Write(ctx, "", req.Path, in, req.Limit); err == nil {
			rep.Info = &info
		}
	case OpWriteExtents:
		var info file.Info
		in := &progressReader{r: &chunkReader{r: stdin}, w: w}
		if info, rep.Data, err = fs.WriteExtents(ctx, "", req.Path, in, req.Size, req.Limit); err == nil {
			rep.Info = &info
		}
	case OpSkills:
		err = installSkills(ctx, skillsDir, &progressReader{r: &chunkReader{r: stdin}, w: w}, req.Limit)
	case OpRemove:
		err = fs.Remove(ctx, "", req.Path)
	case OpRemovePrefix:
		rep.Count, err = fs.RemovePrefix(ctx, "", file.Mount(req.Mount), req.Prefix)
	default:
		err = fmt.Errorf("fileop: unknown operation %q", req.Op)
	}
	if err != nil {
		rep = Reply{Error: EncodeError(err)}
	}
	line, jerr := json.Marshal(rep)
	if jerr != nil {
		line, _ = json.Marshal(Reply{Error: &Error{Message: "fileop: encode reply: " + jerr.Error()}})
	}
	if _, err := w.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("fileop: reply: %w", err)
	}
	if body != nil && req.Op == OpOpenExtents {
		defer body.Close()
		if err := sparse.Write(w, body, rep.Info.Size); err != nil {
			return fmt.Errorf("fileop: send %s: %w", req.Path, err)
		}
	} else if body != nil {
		defer body.Close()
		// Exactly Info.Size bytes follow: a file that grew since is cut,
		// one that shrank is padded with nothing and the host sees the
		// short read as an error.
		if _, err := io.Copy(w, io.LimitReader(body, rep.Info.Size)); err != nil {
			return fmt.Errorf("fileop: send %s: %w", req.Path, err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("fileop: reply: %w", err)
	}
	return nil
}

// progressReader reports on w how much of r was read, every ProgressEvery
// bytes, flushing each report at once.
type progressReader struct {
	r        io.Reader
	w        *bufio.Writer
	n, shown int64
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.n-p.shown >= ProgressEvery || (err == io.EOF && p.n > p.shown) {
		p.shown = p.n
		_, _ = p.w.WriteString("+" + strconv.FormatInt(p.n, 10) + "\n")
		_ = p.w.Flush()
	}
	return n, err
}

package checkpoints

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Codec is how an archive's tar stream is compressed.
type Codec string

// The codecs. Unpack tells them apart by their first bytes, so an archive
// written with any of them stays readable.
const (
	Zstd Codec = "zstd" // the one the store writes (docs/benchmarks.md has the figures)
	Gzip Codec = "gzip" // measured against zstd, never written by the store
	None Codec = "none" // a plain tar stream
)

// skipped names the files of a checkpoint folder that are the host's
// bookkeeping, not the image: the local seal and the archive marker are
// written after the archive.
var skipped = map[string]bool{"threadbox-sealed.json": true, markerFile: true, markerFile + ".tmp": true}

// Pack writes the checkpoint image in dir (its regular files and folders)
// to w as a tar stream compressed with codec.
func Pack(ctx context.Context, dir string, w io.Writer, codec Codec) error {
	var (
		out   io.Writer = w
		flush func() error
	)
	switch codec {
	case Zstd:
		// The fastest level: a checkpoint is written at every idle stop and
		// hand-over, while someone may wait for it, and the image's pages
		// compress well even so.
		zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		if err != nil {
			return fmt.Errorf("checkpoints: zstd: %w", err)
		}
		out, flush = zw, zw.Close
	case Gzip:
		gw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
		if err != nil {
			return fmt.Errorf("checkpoints: gzip: %w", err)
		}
		out, flush = gw, gw.Close
	case None:
		flush = func() error { return nil }
	default:
		return fmt.Errorf("checkpoints: unknown codec %q", codec)
	}
	tw := tar.NewWriter(out)
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." || skipped[rel] {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		switch {
		case e.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: filepath.ToSlash(rel) + "/", Mode: 0o700})
		case e.Type().IsRegular():
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: 0o600, Size: info.Size()}); err != nil {
				return err
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		default:
			return fmt.Errorf("%s is neither a file nor a folder", rel)
		}
	})
	if err == nil {
		err = tw.Close()
	}
	if ferr := flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("checkpoints: pack: %w", err)
	}
	return nil
}

// Unpack writes the archive r (any codec) into dir, an empty folder. Only
// folders and regular files are made, each inside dir.
func Unpack(ctx context.Context, r io.Reader, dir string) error {
	br := bufio.NewReaderSize(r, 1<<20)
	head, _ := br.Peek(4)
	var in io.Reader = br
	switch {
	case bytes.Equal(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(2))
		if err != nil {
			return fmt.Errorf("checkpoints: unpack: %w", err)
		}
		defer zr.Close()
		in = zr
	case len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b:
		gr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("checkpoints: unpack: %w", err)
		}
		in = gr
	}
	tr := tar.NewReader(in)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("checkpoints: unpack: %w", err)
		}
		name := filepath.FromSlash(strings.TrimSuffix(h.Name, "/"))
		if !filepath.IsLocal(name) || skipped[name] {
			return fmt.Errorf("checkpoints: unpack: %q is not a file of a checkpoint", h.Name)
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o700); err != nil {
				return fmt.Errorf("checkpoints: unpack: %w", err)
			}
		case tar.TypeReg:
			if err := writeFile(path, tr); err != nil {
				return fmt.Errorf("checkpoints: unpack: %w", err)
			}
		default:
			return fmt.Errorf("checkpoints: unpack: %q is neither a file nor a folder", h.Name)
		}
	}
}

// writeFile writes r to a new file at path, sparse: a block of zeros is
// skipped over, not written, so that a memory image's untouched pages (a
// microVM's RAM, which the archive holds as zeros) take no disk space and
// read back as holes.
func writeFile(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = writeSparse(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// sparseBlock is the unit writeSparse skips when it is all zeros.
const sparseBlock = 4096

// writeSparse copies r into f (empty), leaving each whole block of zeros
// a hole, and sets f's size to what r held.
func writeSparse(f *os.File, r io.Reader) error {
	buf := make([]byte, 1<<20)
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		for b := 0; b < n; b += sparseBlock {
			blk := buf[b:min(b+sparseBlock, n)]
			if !allZero(blk) {
				if _, werr := f.WriteAt(blk, off); werr != nil {
					return werr
				}
			}
			off += int64(len(blk))
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return f.Truncate(off)
		}
		if err != nil {
			return err
		}
	}
}

// allZero reports whether b holds only zeros.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

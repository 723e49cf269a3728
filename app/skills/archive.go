package skills

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"path"
	"strings"

	"threadbox/domain/fault"
	"threadbox/domain/skill"
)

// ReadArchive reads and checks every entry of a zip or tar (optionally
// gzip-compressed) archive and returns its files, with the archive's
// single top-level folder stripped when SKILL.md is inside it.
func ReadArchive(raw []byte, lim skill.Limits) ([]skill.File, error) {
	var (
		files []skill.File
		err   error
	)
	switch {
	case bytes.HasPrefix(raw, []byte("PK\x03\x04")) || bytes.HasPrefix(raw, []byte("PK\x05\x06")):
		files, err = readZip(raw, lim)
	case bytes.HasPrefix(raw, []byte{0x1f, 0x8b}):
		zr, gerr := gzip.NewReader(bytes.NewReader(raw))
		if gerr != nil {
			return nil, fault.Wrap(fault.Invalid, "skill archive: bad gzip stream", gerr)
		}
		files, err = readTar(zr, lim)
	default:
		files, err = readTar(bytes.NewReader(raw), lim)
	}
	if err != nil {
		return nil, err
	}
	files = stripTop(files)
	// Each path once, and none both a file and a folder ("a" and "a/b"):
	// such an archive cannot be written out.
	paths := make(map[string]bool, len(files))
	for _, f := range files {
		if paths[f.Path] {
			return nil, fault.Errorf(fault.Invalid, "skill archive: %q appears twice", f.Path)
		}
		paths[f.Path] = true
	}
	for _, f := range files {
		for dir := path.Dir(f.Path); dir != "." && dir != "/"; dir = path.Dir(dir) {
			if paths[dir] {
				return nil, fault.Errorf(fault.Invalid, "skill archive: %q is a file and also a folder of %q", dir, f.Path)
			}
		}
	}
	return files, nil
}

// stripTop removes a single top-level folder holding SKILL.md.
func stripTop(files []skill.File) []skill.File {
	top := ""
	for _, f := range files {
		if f.Path == manifestName {
			return files
		}
		first, _, nested := strings.Cut(f.Path, "/")
		if !nested || (top != "" && first != top) {
			return files
		}
		top = first
	}
	if top == "" {
		return files
	}
	out := make([]skill.File, 0, len(files))
	for _, f := range files {
		out = append(out, skill.File{Path: strings.TrimPrefix(f.Path, top+"/"), Data: f.Data})
	}
	return out
}

func readZip(raw []byte, lim skill.Limits) ([]skill.File, error) {
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		return nil, fault.Wrap(fault.Invalid, "skill archive: not a valid zip file", err)
	}
	es := newEntries(lim)
	for _, f := range zr.File {
		mode := f.Mode()
		kind := skill.Other
		switch {
		case mode&fs.ModeSymlink != 0:
			kind = skill.Link
		case mode.IsDir():
			kind = skill.Folder
		case mode.IsRegular():
			kind = skill.RegularFile
		}
		if err := es.add(f.Name, kind, int64(min(f.UncompressedSize64, 1<<62)), f.Open); err != nil {
			return nil, err
		}
	}
	return es.files, nil
}

func readTar(r io.Reader, lim skill.Limits) ([]skill.File, error) {
	tr := tar.NewReader(r)
	es := newEntries(lim)
	open := func() (io.ReadCloser, error) { return io.NopCloser(tr), nil }
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fault.Wrap(fault.Invalid, "skill archive: not a valid zip or tar file", err)
		}
		kind := skill.Other
		switch h.Typeflag {
		case tar.TypeXGlobalHeader:
			continue
		case tar.TypeReg, tar.TypeRegA:
			kind = skill.RegularFile
		case tar.TypeDir:
			kind = skill.Folder
		case tar.TypeSymlink, tar.TypeLink:
			kind = skill.Link
		}
		if err := es.add(h.Name, kind, h.Size, open); err != nil {
			return nil, err
		}
	}
	if len(es.files) == 0 {
		return nil, fault.New(fault.Invalid, "skill archive is empty or not a zip or tar file")
	}
	return es.files, nil
}

// entries are the files read from an archive's entries, within the limits.
type entries struct {
	lim   skill.Limits
	tally *skill.Tally
	files []skill.File
}

func newEntries(lim skill.Limits) *entries {
	return &entries{lim: lim, tally: skill.NewTally(lim)}
}

// add checks the entry name of kind (size counts for a regular file only)
// against the limits and keeps its content, read through open, as a file;
// a folder and the archive's root are only checked.
func (es *entries) add(name string, kind skill.EntryKind, size int64, open func() (io.ReadCloser, error)) error {
	rel, err := skill.CleanEntry(name, kind)
	if err != nil {
		return err
	}
	if kind != skill.RegularFile {
		size = 0
	}
	if err := es.tally.Add(name, size); err != nil {
		return err
	}
	if kind == skill.Folder || rel == "" {
		return nil
	}
	rc, err := open()
	if err != nil {
		return fault.Wrap(fault.Invalid, "skill archive: unreadable entry "+name, err)
	}
	defer rc.Close()
	data, err := readCapped(rc, name, es.lim.MaxFileBytes)
	if err != nil {
		return err
	}
	es.files = append(es.files, skill.File{Path: rel, Data: data})
	return nil
}

// readCapped reads an entry whose declared size may lie.
func readCapped(r io.Reader, name string, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fault.Wrap(fault.Invalid, "skill archive: unreadable entry "+name, err)
	}
	if int64(len(data)) > limit {
		return nil, fault.Errorf(fault.TooLarge, "skill archive entry %q is larger than %d bytes", name, limit)
	}
	return data, nil
}

// Package migrations embeds the versioned SQL schema. The schema comes only
// from these files; nothing is auto-migrated.
//
// The schema is written once, in PostgreSQL's spelling (the *.sql files
// here), and serves both dialects: SQLite reads a timestamp column's type
// TIMESTAMPTZ as DATETIME, the name its driver turns into time.Time. A
// migration that cannot be written the same way for both (SQLite cannot
// change a primary key in place) has a file of each dialect's own under
// postgres/ and sqlite/, which takes the shared file's place.
package migrations

import (
	"bytes"
	"embed"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

//go:embed *.sql postgres/*.sql sqlite/*.sql
var files embed.FS

// Postgres holds the PostgreSQL migrations under postgres/.
var Postgres fs.FS = build("postgres", strings.NewReplacer())

// SQLite holds the SQLite migrations under sqlite/.
var SQLite fs.FS = build("sqlite", strings.NewReplacer("TIMESTAMPTZ", "DATETIME"))

// build returns a file system whose one folder, dir, holds the shared
// migrations as spell rewrites them, and dir's own in their place. The
// files are embedded, so reading them cannot fail.
func build(dir string, spell *strings.Replacer) fs.FS {
	m := mapFS{dir: dir, files: map[string][]byte{}}
	shared, _ := fs.Glob(files, "*.sql")
	for _, name := range shared {
		b, _ := files.ReadFile(name)
		m.files[name] = []byte(spell.Replace(string(b)))
	}
	own, _ := fs.Glob(files, dir+"/*.sql")
	for _, name := range own {
		b, _ := files.ReadFile(name)
		m.files[path.Base(name)] = b
	}
	return m
}

// mapFS is a read-only file system of one folder, dir, holding files.
type mapFS struct {
	dir   string
	files map[string][]byte
}

// Open opens ".", the folder or one of its files.
func (m mapFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	switch {
	case name == ".":
		return &dirFile{info: info{name: ".", dir: true}, entries: []fs.DirEntry{fs.FileInfoToDirEntry(info{name: m.dir, dir: true})}}, nil
	case name == m.dir:
		return &dirFile{info: info{name: m.dir, dir: true}, entries: m.entries()}, nil
	}
	if d, base := path.Split(name); d == m.dir+"/" {
		if b, ok := m.files[base]; ok {
			return &file{info: info{name: base, size: int64(len(b))}, r: bytes.NewReader(b)}, nil
		}
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

// entries lists the folder's files by name.
func (m mapFS) entries() []fs.DirEntry {
	names := make([]string, 0, len(m.files))
	for n := range m.files {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]fs.DirEntry, len(names))
	for i, n := range names {
		out[i] = fs.FileInfoToDirEntry(info{name: n, size: int64(len(m.files[n]))})
	}
	return out
}

// info describes a file or folder of a mapFS.
type info struct {
	name string
	size int64
	dir  bool
}

func (i info) Name() string       { return i.name }
func (i info) Size() int64        { return i.size }
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return i.dir }
func (i info) Sys() any           { return nil }
func (i info) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}

// file is an open migration.
type file struct {
	info info
	r    *bytes.Reader
}

func (f *file) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *file) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *file) Close() error               { return nil }

// dirFile is an open folder.
type dirFile struct {
	info    info
	entries []fs.DirEntry
	read    int
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dirFile) Close() error               { return nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.name, Err: fs.ErrInvalid}
}

// ReadDir returns the next n entries, or all that are left when n <= 0.
func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	left := d.entries[d.read:]
	if n <= 0 {
		d.read = len(d.entries)
		return left, nil
	}
	if len(left) == 0 {
		return nil, io.EOF
	}
	left = left[:min(n, len(left))]
	d.read += len(left)
	return left, nil
}

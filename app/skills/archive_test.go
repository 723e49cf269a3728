package skills

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"io/fs"
	"strings"
	"testing"

	"threadbox/domain/fault"
	"threadbox/domain/skill"
)

const manifest = "---\nname: pdf-tools\ndescription: \"Fill and merge PDFs\"\n---\n# PDF tools\n"

type entry struct {
	name, body string
	mode       fs.FileMode
	typ        byte // tar only; 0 means by mode
	link       string
}

func zipOf(t *testing.T, es ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	for _, e := range es {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h.SetMode(mode)
		fw, err := w.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write([]byte(e.body))
	}
	w.Close()
	return b.Bytes()
}

func tarOf(t *testing.T, gz bool, es ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	var tw *tar.Writer
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&b)
		tw = tar.NewWriter(zw)
	} else {
		tw = tar.NewWriter(&b)
	}
	for _, e := range es {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: typ, Linkname: e.link}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return b.Bytes()
}

func TestReadArchive(t *testing.T) {
	lim := skill.Limits{MaxEntries: 5, MaxFileBytes: 100, MaxTotalBytes: 150}
	cases := []struct {
		name    string
		raw     []byte
		want    []string // paths
		wantErr fault.Kind
	}{
		{"zip at root", zipOf(t, entry{name: "SKILL.md", body: manifest}, entry{name: "bin/run.py", body: "print(1)"}), []string{"SKILL.md", "bin/run.py"}, ""},
		{"zip in one top folder is stripped", zipOf(t, entry{name: "pdf/SKILL.md", body: manifest}, entry{name: "pdf/a.txt", body: "a"}), []string{"SKILL.md", "a.txt"}, ""},
		{"tar", tarOf(t, false, entry{name: "SKILL.md", body: manifest}), []string{"SKILL.md"}, ""},
		{"tar.gz with a folder entry", tarOf(t, true, entry{name: "x/", typ: tar.TypeDir}, entry{name: "x/SKILL.md", body: manifest}), []string{"SKILL.md"}, ""},
		{"zip traversal", zipOf(t, entry{name: "SKILL.md", body: manifest}, entry{name: "../evil.sh", body: "x"}), nil, fault.Invalid},
		{"zip nested traversal", zipOf(t, entry{name: "a/../../evil", body: "x"}), nil, fault.Invalid},
		{"zip absolute", zipOf(t, entry{name: "/etc/cron.d/x", body: "x"}), nil, fault.Invalid},
		{"zip symlink", zipOf(t, entry{name: "SKILL.md", body: manifest}, entry{name: "link", body: "/etc/passwd", mode: fs.ModeSymlink | 0o777}), nil, fault.Invalid},
		{"tar symlink", tarOf(t, false, entry{name: "SKILL.md", body: manifest}, entry{name: "l", typ: tar.TypeSymlink, link: "../../x"}), nil, fault.Invalid},
		{"tar hard link", tarOf(t, false, entry{name: "SKILL.md", body: manifest}, entry{name: "l", typ: tar.TypeLink, link: "SKILL.md"}), nil, fault.Invalid},
		{"tar device", tarOf(t, false, entry{name: "dev", typ: tar.TypeChar}), nil, fault.Invalid},
		{"tar traversal", tarOf(t, false, entry{name: "../../x", body: "x"}), nil, fault.Invalid},
		{"a file that is also a folder", tarOf(t, false, entry{name: "SKILL.md", body: manifest}, entry{name: "a", body: "x"}, entry{name: "a/b", body: "y"}), nil, fault.Invalid},
		{"a path twice", zipOf(t, entry{name: "SKILL.md", body: manifest}, entry{name: "x", body: "1"}, entry{name: "x", body: "2"}), nil, fault.Invalid},
		{"too many entries", zipOf(t, entry{name: "1"}, entry{name: "2"}, entry{name: "3"}, entry{name: "4"}, entry{name: "5"}, entry{name: "6"}), nil, fault.Invalid},
		{"file too large", zipOf(t, entry{name: "big", body: strings.Repeat("x", 101)}), nil, fault.TooLarge},
		{"total too large", zipOf(t, entry{name: "a", body: strings.Repeat("x", 80)}, entry{name: "b", body: strings.Repeat("x", 80)}), nil, fault.TooLarge},
		{"not an archive", []byte("hello, this is not an archive at all"), nil, fault.Invalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files, err := ReadArchive(tc.raw, lim)
			if tc.wantErr != "" {
				if !fault.Is(err, tc.wantErr) {
					t.Fatalf("want %s, got %v (%d files)", tc.wantErr, err, len(files))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range files {
				got = append(got, f.Path)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("paths %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseManifest(t *testing.T) {
	m, err := skill.ParseManifest([]byte(manifest))
	if err != nil || m.Name != "pdf-tools" || m.Description != "Fill and merge PDFs" {
		t.Fatalf("%+v %v", m, err)
	}
	for _, bad := range []string{
		"# no front matter",
		"---\nname: x\ndescription: y\n",              // not closed
		"---\nname: Bad Name\ndescription: y\n---\n",  // bad name
		"---\nname: ok\n---\n",                        // no description
		"---\nname: ../x\ndescription: escape\n---\n", // traversal as a name
	} {
		if _, err := skill.ParseManifest([]byte(bad)); !fault.Is(err, fault.Invalid) {
			t.Errorf("%q accepted: %v", bad, err)
		}
	}
}

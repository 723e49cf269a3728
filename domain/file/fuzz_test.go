package file

import (
	"path"
	"strings"
	"testing"
)

// FuzzKeyPath: a key that is accepted lands inside the uploads or outputs
// folder, as a clean path, and maps back to itself.
func FuzzKeyPath(f *testing.F) {
	for _, k := range []string{"a.txt", "outputs/r.png", "data/2026/q3.csv", "../x", "a/../../b", "%2e%2e/x", ".%2E/x",
		"%252e%252e/x", "a%2Fb", "outputs/", "outputs", "a\\b", "a\x00b", "./a", "a//b", "%", "%zz", "é/ü.txt"} {
		f.Add(k)
	}
	table := DefaultTable()
	f.Fuzz(func(t *testing.T, key string) {
		p, err := KeyPath(key)
		if err != nil {
			return
		}
		if path.Clean(p) != p || strings.Contains(p, "\x00") {
			t.Fatalf("KeyPath(%q) = %q: not clean", key, p)
		}
		loc, err := table.Resolve(p)
		if err != nil || (loc.Mount != Uploads && loc.Mount != Outputs) || loc.Rel == "." {
			t.Fatalf("KeyPath(%q) = %q: resolves to %+v, %v", key, p, loc, err)
		}
		if back, ok := KeyOf(loc.Mount, loc.Rel); !ok || back != key {
			t.Fatalf("KeyPath(%q) = %q: key of it is %q", key, p, back)
		}
	})
}

// FuzzDecodeID: an accepted id names a clean absolute path and is the one
// encoding of it; nothing panics.
func FuzzDecodeID(f *testing.F) {
	for _, id := range []string{EncodeID("/mnt/user-data/outputs/r.png"), EncodeID("/"), "L21udA", "L21udA==", "L21udA\n", "", "!!", "Lw"} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		p, err := DecodeID(id)
		if err != nil {
			return
		}
		if !path.IsAbs(p) || path.Clean(p) != p || strings.Contains(p, "\x00") || EncodeID(p) != id {
			t.Fatalf("DecodeID(%q) = %q", id, p)
		}
	})
}

// FuzzResolve: a resolved path is the clean join of its mount and its
// relative part, which never climbs out of the mount.
func FuzzResolve(f *testing.F) {
	for _, p := range []string{"/mnt/user-data/outputs/a", "x.py", "../../etc/passwd", "/mnt/user-data/outputs/../uploads/a",
		"/mnt/user-data/outputsX", "/mnt/skills/public/../../../etc", "//mnt//user-data/./outputs", "", "\x00"} {
		f.Add(p)
	}
	table := DefaultTable()
	f.Fuzz(func(t *testing.T, p string) {
		loc, err := table.Resolve(p)
		if err != nil {
			return
		}
		base, ok := table.Path(loc.Mount, ".")
		if !ok {
			t.Fatalf("Resolve(%q): unknown mount %q", p, loc.Mount)
		}
		if loc.Rel == ".." || strings.HasPrefix(loc.Rel, "../") || path.IsAbs(loc.Rel) || path.Clean(loc.Rel) != loc.Rel {
			t.Fatalf("Resolve(%q): rel %q leaves its mount", p, loc.Rel)
		}
		if joined, _ := table.Path(loc.Mount, loc.Rel); joined != loc.Path || !strings.HasPrefix(loc.Path+"/", base+"/") {
			t.Fatalf("Resolve(%q) = %+v: path is not mount %q + rel", p, loc, base)
		}
	})
}

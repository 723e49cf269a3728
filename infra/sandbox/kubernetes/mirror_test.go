package kubernetes

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"threadbox/domain/file"
)

// TestMirrorFollowsAPathThatChangedItsKind: a claim's file that became a
// folder (a → a/b), and a folder that became a file (c/d → c), reach the
// snapshot mirror on the next pull, and every later pull works; the
// mirror's old entry no longer stands in the new one's way.
func TestMirrorFollowsAPathThatChangedItsKind(t *testing.T) {
	host := t.TempDir()
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// The claim's files as the pod holds them: rel → content.
	claim := map[string]string{"a": "file a", "c/d": "file c/d"}
	infos := func() []file.Info {
		var out []file.Info
		for rel, body := range claim {
			out = append(out, file.Info{Rel: rel, Size: int64(len(body)), Modified: when})
		}
		return out
	}
	fetch := func(info file.Info) error {
		dst := filepath.Join(host, filepath.FromSlash(info.Rel))
		if err := writeMirror(dst, bytes.NewReader([]byte(claim[info.Rel]))); err != nil {
			return err
		}
		return os.Chtimes(dst, when, when)
	}
	check := func(step string) {
		t.Helper()
		have, err := mirrorFiles(host)
		if err != nil {
			t.Fatal(err)
		}
		if len(have) != len(claim) {
			t.Errorf("%s: the mirror holds %v, the claim %v", step, have, claim)
		}
		for rel, body := range claim {
			got, err := os.ReadFile(filepath.Join(host, filepath.FromSlash(rel)))
			if err != nil || string(got) != body {
				t.Errorf("%s: the mirror's %s: %q, %v; want %q", step, rel, got, err, body)
			}
		}
	}
	if err := syncMirror("c1", host, infos(), fetch); err != nil {
		t.Fatal(err)
	}
	check("first pull")

	claim = map[string]string{"a/b": "file a/b", "c": "file c"}
	for round := 1; round <= 2; round++ {
		if err := syncMirror("c1", host, infos(), fetch); err != nil {
			t.Fatalf("pull %d after a and c changed their kind: %v", round, err)
		}
		check("after a and c changed their kind")
	}
}

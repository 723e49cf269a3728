package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	msgwire "threadbox/app/messages/wire"
	"threadbox/infra/llm/fakeupstream"
)

// editorTurn runs a workspace turn in thread tid whose model writes each
// file (name under outputs → content) with the text editor, and returns
// the sha256 of the artifact of each file, read from the project's list.
func editorTurn(t *testing.T, s *server, fake *fakeupstream.Server, tok, pid, tid string, files map[string]string) map[string]string {
	t.Helper()
	var calls []msgwire.ContentBlock
	for _, name := range slices.Sorted(maps.Keys(files)) {
		calls = append(calls, call("text_editor_code_execution", map[string]any{
			"command": "create", "path": "/mnt/user-data/outputs/" + name, "file_text": files[name]}))
	}
	fake.Push(steps(calls...), textStep("saved"))
	r := s.do("POST", appAPI+"/thread/"+tid+"/messages", tok, map[string]any{"content": "save them", "pgpt": map[string]any{"tools": []any{"code_execution"}}})
	if r.status != 200 {
		t.Fatalf("turn: %d %s", r.status, r.body)
	}
	got := map[string]string{}
	for _, a := range s.do("GET", appAPI+"/project/"+pid+"/artifacts", tok, nil).json(t)["data"].([]any) {
		a := a.(map[string]any)
		if a["thread_id"] == tid {
			got[a["name"].(string)] = a["sha256"].(string)
		}
	}
	for name, content := range files {
		if sum := sha256.Sum256([]byte(content)); got[name] != hex.EncodeToString(sum[:]) {
			t.Fatalf("artifact of %s: %q (artifacts %v; turn %s)", name, got[name], got, r.body)
		}
	}
	return got
}

// blobFile is where the artifact store keeps the content with hash sum.
func (s *server) blobFile(sum string) string {
	return filepath.Join(s.dataDir, "artifacts", sum[:2], sum)
}

// exists reports whether a file is there.
func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// writeBlob puts content into the artifact store as a blob no artifact
// references, last written ago.
func writeBlob(t *testing.T, s *server, content string, ago time.Duration) string {
	t.Helper()
	h := sha256.Sum256([]byte(content))
	sum := hex.EncodeToString(h[:])
	p := s.blobFile(sum)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-ago)
	if err := os.Chtimes(p, at, at); err != nil {
		t.Fatal(err)
	}
	return sum
}

// TestArtifactBlobsFollowTheirArtifacts: two projects save an artifact of
// the same content, the first one also one of its own. Deleting the first
// project removes its own blob from DATA_DIR/artifacts and keeps the
// shared one, still downloadable from the second project; deleting a
// thread keeps its blobs (its artifacts stay in the project). The
// collection the sweeper runs, reached through the server's wiring,
// removes an unreferenced blob older than the grace period and spares a
// younger one and the referenced ones.
func TestArtifactBlobsFollowTheirArtifacts(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s, fake := modelServer(t, db, "anthropic", nil)
		f := newWSFixture(t, s)
		a := f.admin
		r := s.do("POST", appAPI+"/project", a, map[string]any{"name": "Other"})
		if r.status != 201 {
			t.Fatalf("project: %d %s", r.status, r.body)
		}
		pid2 := r.json(t)["id"].(string)
		tid2 := f.thread(t, a, pid2)

		first := editorTurn(t, s, fake, a, f.pid, f.tid, map[string]string{"shared.csv": "region,total\nNorth,40\n", "mine.txt": "only the first project has this"})
		second := editorTurn(t, s, fake, a, pid2, tid2, map[string]string{"copy.csv": "region,total\nNorth,40\n"})
		shared, mine := second["copy.csv"], first["mine.txt"]
		if first["shared.csv"] != shared || !exists(t, s.blobFile(shared)) || !exists(t, s.blobFile(mine)) {
			t.Fatalf("blobs after the turns: first %v second %v", first, second)
		}

		// A thread's artifacts stay with its project, and so do their blobs.
		if r := s.do("DELETE", appAPI+"/thread/"+f.tid, a, nil); r.status != 204 {
			t.Fatalf("delete thread: %d %s", r.status, r.body)
		}
		if !exists(t, s.blobFile(mine)) || !exists(t, s.blobFile(shared)) {
			t.Fatal("deleting a thread removed blobs of its project's artifacts")
		}

		if r := s.do("DELETE", appAPI+"/project/"+f.pid, a, nil); r.status != 204 {
			t.Fatalf("delete project: %d %s", r.status, r.body)
		}
		if exists(t, s.blobFile(mine)) {
			t.Error("the deleted project's own blob is still in DATA_DIR/artifacts")
		}
		if !exists(t, s.blobFile(shared)) {
			t.Fatal("the blob shared with another project was removed")
		}
		list := s.do("GET", appAPI+"/project/"+pid2+"/artifacts", a, nil).json(t)["data"].([]any)
		if len(list) != 1 {
			t.Fatalf("artifacts of the other project: %v", list)
		}
		if dl := s.do("GET", appAPI+"/artifact/"+list[0].(map[string]any)["id"].(string)+"/content", a, nil); dl.status != 200 || string(dl.body) != "region,total\nNorth,40\n" {
			t.Fatalf("shared artifact after the other project was deleted: %d %q", dl.status, dl.body)
		}

		// The collection: a blob left by a save that never committed its
		// row, past the grace period, goes; a young one and the
		// referenced one (however old) stay.
		orphan := writeBlob(t, s, "left behind by a failed save", 11*time.Minute)
		young := writeBlob(t, s, "a save under way", time.Minute)
		at := time.Now().Add(-time.Hour)
		if err := os.Chtimes(s.blobFile(shared), at, at); err != nil {
			t.Fatal(err)
		}
		s.stop()
		cfg, err := loadConfig(s.getenv)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		sys, err := wire(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer sys.Close()
		removed, err := sys.workspace.CollectArtifactBlobs(ctx)
		if err != nil || removed != 1 {
			t.Fatalf("CollectArtifactBlobs = %d, %v; want 1", removed, err)
		}
		if exists(t, s.blobFile(orphan)) {
			t.Error("the orphaned blob past the grace period is still there")
		}
		if !exists(t, s.blobFile(young)) || !exists(t, s.blobFile(shared)) {
			t.Error("the collection removed a young or a referenced blob")
		}
	})
}

package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"threadbox/app/messages/wire"
	"threadbox/domain/artifact"
	"threadbox/domain/file"
)

// manyOutputs is a container whose outputs folder holds n small files.
type manyOutputs struct {
	readOnly
	n int
}

func (m manyOutputs) name(i int) string { return fmt.Sprintf("f%03d.txt", i) }

func (m manyOutputs) Walk(context.Context, string, string) ([]file.Info, error) {
	out := make([]file.Info, m.n)
	for i := range out {
		out[i] = file.Info{Rel: m.name(i), Size: 4, Modified: time.Unix(int64(i), 0), Inode: uint64(i + 1)}
	}
	return out, nil
}

func (m manyOutputs) Open(_ context.Context, _, p string) (io.ReadSeekCloser, file.Info, error) {
	rel := strings.TrimPrefix(p, "/mnt/user-data/outputs/")
	return nopCloser{strings.NewReader(rel[:4])}, file.Info{Rel: rel, Size: 4}, nil
}

// TestArtifactsPerToolCallAreCapped: one tool call saves at most
// MaxArtifactsPerCall artifacts; the turn says how many new outputs it left
// unsaved, and later calls save them, the cap at a time.
func TestArtifactsPerToolCallAreCapped(t *testing.T) {
	ctx := context.Background()
	svc, _, p, th := setup(t, scriptEngine{})
	svc.d.Container = manyOutputs{n: 7}
	svc.d.MaxArtifactsPerCall = 3
	for _, want := range []struct {
		resources int
		note      string // "" for none
		total     int
	}{
		{3, "4 more new or changed files", 3},
		{3, "1 more new or changed file ", 6},
		{1, "", 7},
		{0, "", 7},
	} {
		turn, err := svc.StartTurn(ctx, p, th.ID(), TurnRequest{Content: []wire.ContentBlock{{Type: "text", Text: "go"}}})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := turn.Run(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		resources, notes := 0, []string{}
		for _, b := range resp.Content {
			switch {
			case b.Type == BlockResource:
				resources++
			case b.Type == wire.BlockText && strings.HasPrefix(b.Text, "[threadbox]"):
				notes = append(notes, b.Text)
			}
		}
		if resources != want.resources {
			t.Fatalf("a call announced %d artifacts, want %d", resources, want.resources)
		}
		switch {
		case want.note == "" && len(notes) != 0:
			t.Fatalf("unexpected note: %q", notes)
		case want.note != "" && (len(notes) != 1 || !strings.Contains(notes[0], want.note) || !strings.Contains(notes[0], "one call saves (3)")):
			t.Fatalf("note %q, want one holding %q", notes, want.note)
		}
		arts, _, err := svc.Artifacts(ctx, p, th.ProjectID(), artifact.Page{Limit: artifact.MaxPage})
		if err != nil || len(arts) != want.total {
			t.Fatalf("%d artifacts (%v), want %d", len(arts), err, want.total)
		}
	}
}

// rewrittenOutput is a container whose one output is rewritten in place
// between turns: same size, modification time and inode, as code that
// sets the time back leaves it; only its status change time moves.
type rewrittenOutput struct {
	readOnly
	content *string
	changed *time.Time
}

func (r rewrittenOutput) Walk(context.Context, string, string) ([]file.Info, error) {
	return []file.Info{{Rel: "chart.txt", Size: int64(len(*r.content)), Modified: time.Unix(1, 0), Changed: *r.changed, Inode: 7}}, nil
}

func (r rewrittenOutput) Open(context.Context, string, string) (io.ReadSeekCloser, file.Info, error) {
	return nopCloser{strings.NewReader(*r.content)}, file.Info{Rel: "chart.txt", Size: int64(len(*r.content))}, nil
}

// TestCaptureSeesRewriteInPlace: an output rewritten with its modification
// time set back is saved again, not taken for the one saved before.
func TestCaptureSeesRewriteInPlace(t *testing.T) {
	ctx := context.Background()
	svc, _, p, th := setup(t, scriptEngine{})
	content, changed := "first", time.Unix(100, 0)
	svc.d.Container = rewrittenOutput{content: &content, changed: &changed}
	turn := func() {
		t.Helper()
		tr, err := svc.StartTurn(ctx, p, th.ID(), TurnRequest{Content: []wire.ContentBlock{{Type: "text", Text: "go"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Run(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	turn()
	content, changed = "other", time.Unix(200, 0)
	turn()
	arts, _, err := svc.Artifacts(ctx, p, th.ProjectID(), artifact.Page{Limit: artifact.MaxPage})
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256([]byte("other"))
	for _, a := range arts {
		if a.SHA256 == hex.EncodeToString(want[:]) {
			return
		}
	}
	t.Errorf("no artifact holds the rewritten content: %d artifacts, none of sha256 %x", len(arts), want)
}

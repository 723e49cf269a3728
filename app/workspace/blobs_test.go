package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/domain/artifact"
	"threadbox/domain/fault"
	"threadbox/domain/project"
	"threadbox/domain/thread"
	"threadbox/domain/user"
)

// refStore is a Store fake that holds only the hashes of each project's
// artifacts; the methods these tests do not reach panic (nil Store).
type refStore struct {
	Store
	Artifacts
	mu       sync.Mutex
	hashes   map[string][]string // project id → its artifacts' hashes
	batches  []int               // sizes of the reference questions asked
	fail     error               // answer of ReferencedArtifactHashes
	onCreate func()              // runs before CreateArtifact stores its row
}

func (f *refStore) Project(_ context.Context, orgID, id string) (project.Project, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.hashes[id]; !ok {
		return project.Project{}, fault.New(fault.NotFound, "project not found")
	}
	return project.Restore(id, orgID, "usr_1", "P", time.Unix(0, 0), time.Unix(0, 0)), nil
}

func (f *refStore) ProjectThreads(context.Context, string, string) ([]thread.Thread, error) {
	return nil, nil
}

func (f *refStore) ProjectArtifactHashes(_ context.Context, _, projectID string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.hashes[projectID])
	slices.Sort(out)
	return slices.Compact(out), nil
}

func (f *refStore) DeleteProject(_ context.Context, _, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.hashes, id)
	return nil
}

func (f *refStore) ReferencedArtifactHashes(_ context.Context, sums []string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, len(sums))
	if f.fail != nil {
		return nil, f.fail
	}
	var out []string
	for _, s := range sums {
		for _, hs := range f.hashes {
			if slices.Contains(hs, s) {
				out = append(out, s)
				break
			}
		}
	}
	return out, nil
}

func (f *refStore) ArtifactWithContent(context.Context, string, string, string) (artifact.Artifact, error) {
	return artifact.Artifact{}, fault.New(fault.NotFound, "artifact not found")
}

func (f *refStore) LatestArtifact(context.Context, string, string, string) (artifact.Artifact, error) {
	return artifact.Artifact{}, fault.New(fault.NotFound, "artifact not found")
}

func (f *refStore) CreateArtifact(_ context.Context, a artifact.Artifact) error {
	if f.onCreate != nil {
		f.onCreate()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hashes[a.ProjectID] = append(f.hashes[a.ProjectID], a.SHA256)
	return nil
}

// memBlobs is a blob store in memory: each blob's last write time.
type memBlobs struct {
	mu      sync.Mutex
	written map[string]time.Time
	removed []string
	cutoffs []time.Time // the writtenBefore of each Remove
	failOn  string      // Remove of this sum fails
}

func (b *memBlobs) Put(_ context.Context, r io.Reader) (string, int64, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return "", 0, err
	}
	sum := sha(string(data))
	b.mu.Lock()
	defer b.mu.Unlock()
	b.written[sum] = time.Now()
	return sum, int64(len(data)), nil
}

func (b *memBlobs) Open(context.Context, string) (io.ReadSeekCloser, error) {
	return nil, errors.New("memBlobs: not opened in these tests")
}

func (b *memBlobs) Walk(ctx context.Context, fn func(string, time.Time) error) error {
	b.mu.Lock()
	sums := slices.Sorted(maps.Keys(b.written))
	written := maps.Clone(b.written)
	b.mu.Unlock()
	for _, s := range sums {
		if err := fn(s, written[s]); err != nil {
			return err
		}
	}
	return nil
}

func (b *memBlobs) Remove(_ context.Context, sum string, before time.Time) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cutoffs = append(b.cutoffs, before)
	if sum == b.failOn {
		return false, errors.New("disk on fire")
	}
	w, ok := b.written[sum]
	if !ok || (!before.IsZero() && !w.Before(before)) {
		return false, nil
	}
	delete(b.written, sum)
	b.removed = append(b.removed, sum)
	return true, nil
}

func (b *memBlobs) has(sum string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.written[sum]
	return ok
}

func sha(content string) string {
	h := sha256.Sum256([]byte(content))
	return hex.EncodeToString(h[:])
}

// TestCollectArtifactBlobs: the collection removes exactly the blobs that
// no artifact references and that are older than the grace period, asks
// the store in bounded batches, and has the blob store check the age again.
func TestCollectArtifactBlobs(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	const grace = 10 * time.Minute
	cutoff := now.Add(-grace)
	old, young := now.Add(-time.Hour), now.Add(-time.Minute)
	many := map[string]time.Time{}
	for i := range 1201 {
		many[sha(fmt.Sprint(i))] = old
	}
	tests := []struct {
		name     string
		blobs    map[string]time.Time
		refs     []string // hashes some artifact references
		storeErr error
		failOn   string
		removed  int
		kept     []string
		batches  []int
		wantErr  bool
	}{
		{
			name:  "old unreferenced goes, the rest stays",
			blobs: map[string]time.Time{sha("orphan"): old, sha("young"): young, sha("used"): old, sha("edge"): cutoff},
			refs:  []string{sha("used")}, removed: 1, kept: []string{sha("young"), sha("used"), sha("edge")}, batches: []int{2},
		},
		{name: "nothing stored", blobs: map[string]time.Time{}, batches: nil},
		{name: "only young blobs: no question asked", blobs: map[string]time.Time{sha("a"): young}, kept: []string{sha("a")}},
		{name: "batches of at most 500", blobs: many, removed: 1201, batches: []int{500, 500, 201}},
		{
			name: "a failed removal does not stop the others", blobs: map[string]time.Time{sha("a"): old, sha("b"): old, sha("c"): old},
			failOn: sha("b"), removed: 2, kept: []string{sha("b")}, batches: []int{3}, wantErr: true,
		},
		{
			name: "the store failing removes nothing", blobs: map[string]time.Time{sha("a"): old},
			storeErr: errors.New("database down"), kept: []string{sha("a")}, batches: []int{1}, wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &refStore{hashes: map[string][]string{"prj_1": tt.refs}, fail: tt.storeErr}
			blobs := &memBlobs{written: maps.Clone(tt.blobs), failOn: tt.failOn}
			svc := New(st, st, Deps{Blobs: blobs, BlobGrace: grace, Now: func() time.Time { return now }})
			removed, err := svc.CollectArtifactBlobs(context.Background())
			if (err != nil) != tt.wantErr || removed != tt.removed {
				t.Fatalf("CollectArtifactBlobs = %d, %v; want %d, error %v", removed, err, tt.removed, tt.wantErr)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "workspace: collect artifact blobs: ") {
				t.Errorf("error without its prefix: %v", err)
			}
			if len(blobs.written) != len(tt.kept) {
				t.Errorf("%d blobs left, want %d", len(blobs.written), len(tt.kept))
			}
			for _, k := range tt.kept {
				if !blobs.has(k) {
					t.Errorf("blob %s removed", k[:8])
				}
			}
			if !slices.Equal(st.batches, tt.batches) {
				t.Errorf("questions of %v hashes, want %v", st.batches, tt.batches)
			}
			for _, c := range blobs.cutoffs {
				if !c.Equal(cutoff) {
					t.Fatalf("Remove with cutoff %v, want %v: the age must be checked again at removal", c, cutoff)
				}
			}
		})
	}
}

// TestDeleteProjectRemovesUnsharedBlobs: deleting a project removes the
// blobs of its artifacts that no other project's artifact shares, young
// ones too; a shared blob and blobs of other projects stay.
func TestDeleteProjectRemovesUnsharedBlobs(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	st := &refStore{hashes: map[string][]string{
		"prj_1": {sha("shared"), sha("mine"), sha("mine")},
		"prj_2": {sha("shared"), sha("theirs")},
	}}
	blobs := &memBlobs{written: map[string]time.Time{sha("shared"): now, sha("mine"): now, sha("theirs"): now, sha("orphan"): now}}
	svc := New(st, st, Deps{Blobs: blobs})
	p := user.Principal{OrgID: "org_1", UserID: "usr_1", Role: user.Member}
	if err := svc.DeleteProject(ctx, p, "prj_1"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(blobs.removed, []string{sha("mine")}) {
		t.Fatalf("removed %v, want only the project's unshared blob", blobs.removed)
	}
	for _, k := range []string{sha("shared"), sha("theirs"), sha("orphan")} {
		if !blobs.has(k) {
			t.Errorf("blob %s removed", k[:8])
		}
	}
	// Someone else's project: refused, and nothing is removed.
	stranger := user.Principal{OrgID: "org_1", UserID: "usr_9", Role: user.Member}
	if err := svc.DeleteProject(ctx, stranger, "prj_2"); !fault.Is(err, fault.Forbidden) {
		t.Fatalf("delete by a stranger: %v", err)
	}
	if len(blobs.removed) != 1 {
		t.Fatalf("removed %v after a refused delete", blobs.removed)
	}
}

// TestDeleteProjectSparesBlobOfSaveUnderWay: a project is deleted while an
// artifact with the same content is being saved into another project (the
// blob written, its row not yet committed). The deletion waits for the
// save, so the blob, referenced again, stays.
func TestDeleteProjectSparesBlobOfSaveUnderWay(t *testing.T) {
	ctx := context.Background()
	creating, release := make(chan struct{}), make(chan struct{})
	st := &refStore{hashes: map[string][]string{"prj_1": {sha("shared")}, "prj_2": nil}}
	st.onCreate = func() { close(creating); <-release }
	blobs := &memBlobs{written: map[string]time.Time{sha("shared"): time.Now()}}
	svc := New(st, st, Deps{Blobs: blobs, Container: &outputs{data: "shared"}})
	th := thread.Restore("thr_2", "org_1", "prj_2", "usr_1", "T", time.Now(), time.Now())
	saved := make(chan error, 1)
	go func() {
		_, _, err := svc.saveArtifact(ctx, th, th.ContainerID(), "srvtoolu_1", "/mnt/user-data/outputs/chart.png")
		saved <- err
	}()
	<-creating
	deleted := make(chan error, 1)
	go func() { deleted <- svc.DeleteProject(ctx, user.Principal{OrgID: "org_1", UserID: "usr_1"}, "prj_1") }()
	select {
	case err := <-deleted:
		t.Errorf("the project's deletion (%v) ended while a save of the same content was between its blob and its row", err)
		close(release)
	case <-time.After(200 * time.Millisecond):
		close(release)
		if err := <-deleted; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-saved; err != nil {
		t.Fatal(err)
	}
	if !blobs.has(sha("shared")) {
		t.Fatal("the blob of the artifact just saved was removed")
	}
}

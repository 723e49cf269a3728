package checkpoints_test

import (
	"archive/tar"
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/org"
	"threadbox/domain/user"
	"threadbox/infra/blob"
	"threadbox/infra/checkpoints"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/store"
)

// image writes a checkpoint image as a backend would: files at the top
// and in a folder.
func image(t *testing.T, dir, state string) {
	t.Helper()
	for name, data := range map[string]string{"checkpoint.img": state, "pages/p1": strings.Repeat("page ", 4096), "meta.json": `{"runsc":"x"}`} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestArchive(t *testing.T) {
	ctx := context.Background()
	for _, codec := range []checkpoints.Codec{checkpoints.Zstd, checkpoints.Gzip, checkpoints.None} {
		t.Run(string(codec), func(t *testing.T) {
			src := t.TempDir()
			image(t, src, "state of "+string(codec))
			// The host's bookkeeping is not part of the image.
			if err := os.WriteFile(filepath.Join(src, "threadbox-sealed.json"), []byte("{}"), 0o600); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := checkpoints.Pack(ctx, src, &buf, codec); err != nil {
				t.Fatal(err)
			}
			dst := t.TempDir()
			if err := checkpoints.Unpack(ctx, &buf, dst); err != nil {
				t.Fatal(err)
			}
			if got := read(t, filepath.Join(dst, "checkpoint.img")); got != "state of "+string(codec) {
				t.Fatalf("unpacked image %q", got)
			}
			if got := read(t, filepath.Join(dst, "pages/p1")); got != strings.Repeat("page ", 4096) {
				t.Fatalf("unpacked pages: %d bytes", len(got))
			}
			if _, err := os.Stat(filepath.Join(dst, "threadbox-sealed.json")); !os.IsNotExist(err) {
				t.Fatalf("the seal was archived: %v", err)
			}
		})
	}
	// A memory image with untouched pages (a microVM's RAM: 64 MiB, two
	// pages written, one of them partly zero) unpacks with the same bytes
	// and its zeros as holes.
	t.Run("sparse", func(t *testing.T) {
		src := t.TempDir()
		f, err := os.Create(filepath.Join(src, "vm.ram"))
		if err != nil {
			t.Fatal(err)
		}
		page := bytes.Repeat([]byte{7}, 4096)
		page[100] = 0
		for _, off := range []int64{8192, 40 << 20} {
			if _, err := f.WriteAt(page, off); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Truncate(64 << 20); err != nil {
			t.Fatal(err)
		}
		f.Close()
		var buf bytes.Buffer
		if err := checkpoints.Pack(ctx, src, &buf, checkpoints.Zstd); err != nil {
			t.Fatal(err)
		}
		dst := t.TempDir()
		if err := checkpoints.Unpack(ctx, &buf, dst); err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(filepath.Join(src, "vm.ram"))
		got, err := os.ReadFile(filepath.Join(dst, "vm.ram"))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("unpacked RAM differs (%d bytes, want %d): %v", len(got), len(want), err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dst, "vm.ram"), &st); err != nil {
			t.Fatal(err)
		}
		if used := st.Blocks * 512; used > 1<<20 {
			t.Errorf("the unpacked 64 MiB image with two pages written takes %d bytes of disk, want its zeros as holes", used)
		}
	})
	// An archive naming a path outside its folder, a link or the host's
	// bookkeeping is refused and writes nothing outside.
	for _, h := range []tar.Header{
		{Name: "../escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o600},
		{Name: "/abs", Typeflag: tar.TypeReg, Size: 1, Mode: 0o600},
		{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
		{Name: "threadbox-archive.sha256", Typeflag: tar.TypeReg, Size: 1, Mode: 0o600},
	} {
		t.Run("refused "+h.Name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			if err := tw.WriteHeader(&h); err != nil {
				t.Fatal(err)
			}
			if h.Size > 0 {
				_, _ = tw.Write([]byte("x"))
			}
			_ = tw.Close()
			root := t.TempDir()
			dst := filepath.Join(root, "in")
			_ = os.Mkdir(dst, 0o700)
			if err := checkpoints.Unpack(ctx, &buf, dst); err == nil {
				t.Fatal("unpacked")
			}
			if _, err := os.Stat(filepath.Join(root, "escape")); !os.IsNotExist(err) {
				t.Fatal("wrote outside its folder")
			}
		})
	}
}

// fixture is one deployment: a database, the blob store's root, and the
// hosts that share them (each with a data folder of its own).
type fixture struct {
	st    *store.Store
	blobs string
	now   time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st, err := store.Open(context.Background(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &fixture{st: st, blobs: t.TempDir(), now: time.Now().UTC().Truncate(time.Second)}
}

// orgBlobs returns the blob store of an org, as the server wires it.
func (f *fixture) orgBlobs(orgID string) (checkpoints.Blobs, error) {
	return blob.New(filepath.Join(f.blobs, orgID)), nil
}

// host returns the checkpoints of a host with a data folder of its own.
func (f *fixture) host(t *testing.T) (*checkpoints.Store, *hostdirs.Layout) {
	l := hostdirs.New(t.TempDir(), hostdirs.Options{Quota: hostdirs.QuotaNone})
	return checkpoints.New(l, f.st.Containers(), f.orgBlobs, slog.New(slog.DiscardHandler)), l
}

// container makes an org, a user and a container of theirs.
func (f *fixture) container(t *testing.T, name string) container.Container {
	t.Helper()
	ctx := context.Background()
	o, _ := org.New("org_"+name, name, f.now)
	if err := f.st.Accounts().CreateOrg(ctx, o); err != nil {
		t.Fatal(err)
	}
	u, _ := user.New("usr_"+name, o.ID(), name+"@example.test", user.Member, f.now)
	if err := f.st.Accounts().CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	c, err := container.NewForUser(o.ID(), u.ID(), "box", f.now)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.st.Containers().CreateContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// checkpoint writes and seals a checkpoint of c on host h.
func checkpoint(t *testing.T, h *checkpoints.Store, c container.Container, state string) {
	t.Helper()
	ctx := context.Background()
	dir, err := h.EmptyCheckpoint(ctx, c.ID())
	if err != nil {
		t.Fatal(err)
	}
	image(t, dir, state)
	if err := h.SealCheckpoint(ctx, c.ID(), "gvisor"); err != nil {
		t.Fatal(err)
	}
}

// TestStoreAcrossHosts: a sealed checkpoint is recorded with its
// compressed size and its archive is in the org's blob store; the host
// that took it restores from its own folder, another host unpacks the
// archive, a new checkpoint replaces the old one's archive, and a drop
// removes record, archive and folder.
func TestStoreAcrossHosts(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	c := f.container(t, "acme")
	a, la := f.host(t)
	b, _ := f.host(t)
	checkpoint(t, a, c, "first life")
	rec, err := f.st.Containers().ContainerCheckpoint(ctx, c.ID())
	if err != nil {
		t.Fatal(err)
	}
	raw := int64(len("first life") + 5*4096 + len(`{"runsc":"x"}`))
	if rec.OrgID != c.OrgID() || rec.Backend != "gvisor" || rec.Bytes <= 0 || rec.Bytes >= raw {
		t.Fatalf("record %+v: want the org's, compressed below %d bytes", rec, raw)
	}
	if n, err := f.st.Quota().CheckpointBytes(ctx, c.OrgID()); err != nil || n != rec.Bytes {
		t.Fatalf("org's checkpoint bytes %d %v, want %d", n, err, rec.Bytes)
	}
	orgStore, _ := f.orgBlobs(c.OrgID())
	if r, err := orgStore.Open(ctx, rec.SHA256); err != nil {
		t.Fatalf("archive not in the org's store: %v", err)
	} else {
		r.Close()
	}

	// The host that took it uses its folder as it is.
	dir, backend, ok, err := a.Checkpoint(ctx, c.ID())
	if err != nil || !ok || backend != "gvisor" || dir != la.CheckpointDir(c.ID()) || read(t, filepath.Join(dir, "checkpoint.img")) != "first life" {
		t.Fatalf("on its host: %q %q %v %v", dir, backend, ok, err)
	}
	// Another host unpacks the archive.
	dir, backend, ok, err = b.Checkpoint(ctx, c.ID())
	if err != nil || !ok || backend != "gvisor" || read(t, filepath.Join(dir, "checkpoint.img")) != "first life" {
		t.Fatalf("on another host: %q %q %v %v", dir, backend, ok, err)
	}

	// A later checkpoint (on the other host) replaces the first; the
	// first host's stale folder is not taken for it.
	checkpoint(t, b, c, "second life")
	if _, err := orgStore.Open(ctx, rec.SHA256); err == nil {
		t.Fatal("the replaced checkpoint's archive is still stored")
	}
	dir, _, ok, err = a.Checkpoint(ctx, c.ID())
	if err != nil || !ok || read(t, filepath.Join(dir, "checkpoint.img")) != "second life" {
		t.Fatalf("first host after a newer checkpoint: %v %v %q", ok, err, read(t, filepath.Join(dir, "checkpoint.img")))
	}

	rec2, _ := f.st.Containers().ContainerCheckpoint(ctx, c.ID())
	if err := a.DropCheckpoint(ctx, c.ID()); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := b.Checkpoint(ctx, c.ID()); ok || err != nil {
		t.Fatalf("after the drop: %v %v", ok, err)
	}
	if _, err := orgStore.Open(ctx, rec2.SHA256); err == nil {
		t.Fatal("a dropped checkpoint's archive is still stored")
	}
	if _, err := os.Stat(la.CheckpointDir(c.ID())); !os.IsNotExist(err) {
		t.Fatalf("the dropped checkpoint's folder: %v", err)
	}
	if n, _ := f.st.Quota().CheckpointBytes(ctx, c.OrgID()); n != 0 {
		t.Fatalf("org's checkpoint bytes after the drop: %d", n)
	}
}

// TestOtherOrgsArchiveNeverRead: archives are kept per org and read only
// from the store of the container's own org, so a record that names
// another org's archive (however it came to) restores nothing of it, and
// the other org's checkpoint stays whole.
func TestOtherOrgsArchiveNeverRead(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	victim := f.container(t, "victim")
	thief := f.container(t, "thief")
	h, _ := f.host(t)
	checkpoint(t, h, victim, "victim's secrets")
	rec, err := f.st.Containers().ContainerCheckpoint(ctx, victim.ID())
	if err != nil {
		t.Fatal(err)
	}
	thiefStore, _ := f.orgBlobs(thief.OrgID())
	if r, err := thiefStore.Open(ctx, rec.SHA256); err == nil {
		r.Close()
		t.Fatal("the other org's store opens the archive")
	}
	forged := rec
	forged.ContainerID, forged.OrgID = thief.ID(), victim.OrgID()
	if err := f.st.Containers().SaveCheckpoint(ctx, forged); err != nil {
		t.Fatal(err)
	}
	// On another host, so nothing is on disk to begin with.
	other, _ := f.host(t)
	dir, _, ok, err := other.Checkpoint(ctx, thief.ID())
	if err == nil || !ok {
		t.Fatalf("the forged record restored %q (%v %v)", dir, ok, err)
	}
	if dir != "" {
		if b, err := os.ReadFile(filepath.Join(dir, "checkpoint.img")); err == nil {
			t.Fatalf("read the other org's image: %q", b)
		}
	}
	// The victim's checkpoint is untouched.
	v, _, ok, err := other.Checkpoint(ctx, victim.ID())
	if err != nil || !ok || read(t, filepath.Join(v, "checkpoint.img")) != "victim's secrets" {
		t.Fatalf("victim's checkpoint: %v %v", ok, err)
	}
}

// TestStaleCheckpoints: checkpoints past the cutoff and those whose
// container is gone are listed for the sweep.
func TestStaleCheckpoints(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	kept := f.container(t, "kept")
	gone := f.container(t, "gone")
	h, _ := f.host(t)
	checkpoint(t, h, kept, "a")
	checkpoint(t, h, gone, "b")
	if err := f.st.Containers().DeleteContainer(ctx, gone.ID()); err != nil {
		t.Fatal(err)
	}
	ids, err := h.StaleCheckpoints(ctx, time.Now().Add(-time.Hour))
	if err != nil || len(ids) != 1 || ids[0] != gone.ID() {
		t.Fatalf("stale %v %v, want the gone container's", ids, err)
	}
	ids, err = h.StaleCheckpoints(ctx, time.Now().Add(time.Hour))
	if err != nil || len(ids) != 2 {
		t.Fatalf("stale past the age %v %v, want both", ids, err)
	}
}

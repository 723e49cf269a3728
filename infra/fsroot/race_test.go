package fsroot

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"threadbox/domain/file"
)

// TestSwapRace swaps a file, a symlink to a host secret, and a symlinked
// parent folder while hundreds of reads run: no read may ever see the secret.
func TestSwapRace(t *testing.T) {
	modes(t, func(t *testing.T, fx *fixture) {
		ctx := context.Background()
		dir := filepath.Join(fx.dirs.Outputs, "d")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, "f.txt")
		// The swapper alternates: a regular file; a symlink to the secret;
		// the folder d replaced by a symlink to the secret's folder.
		hostDir := filepath.Dir(fx.secret)
		if err := os.WriteFile(filepath.Join(hostDir, "f.txt"), []byte(secretBytes), 0o644); err != nil {
			t.Fatal(err)
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			tmpFile := filepath.Join(fx.dirs.Outputs, "tmpf")
			tmpLink := filepath.Join(fx.dirs.Outputs, "tmpl")
			tmpDirLink := filepath.Join(fx.dirs.Outputs, "tmpd")
			for i := 0; !stop.Load(); i++ {
				switch i % 3 {
				case 0:
					_ = os.WriteFile(tmpFile, []byte("public"), 0o644)
					_ = os.Rename(tmpFile, target)
				case 1:
					_ = os.Remove(tmpLink)
					_ = os.Symlink(fx.secret, tmpLink)
					_ = os.Rename(tmpLink, target)
				case 2:
					// Swap the whole folder for a link and back.
					_ = os.Remove(tmpDirLink)
					_ = os.Symlink(hostDir, tmpDirLink)
					_ = os.Rename(dir, dir+".real")
					_ = os.Rename(tmpDirLink, dir)
					_ = os.Remove(dir)
					_ = os.Rename(dir+".real", dir)
				}
			}
		}()
		var ok, refused int
		for i := 0; i < 600; i++ {
			var got []byte
			var err error
			switch i % 3 {
			case 0:
				got, err = fx.fs.ReadFile(ctx, file.Outputs, "d/f.txt", 1<<10)
			case 1:
				var fh *os.File
				fh, _, err = fx.fs.Open(ctx, file.Outputs, "d/f.txt")
				if err == nil {
					got, _ = io.ReadAll(fh)
					fh.Close()
				}
			case 2:
				var list []file.Info
				list, err = fx.fs.List(ctx, file.Outputs, "d")
				for _, info := range list {
					if !strings.HasPrefix(info.Rel, "d/") {
						t.Errorf("List returned %q", info.Rel)
					}
				}
			}
			if strings.Contains(string(got), "SECRET") {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("read %d returned the host secret", i)
			}
			if err == nil {
				ok++
			} else if errors.Is(err, ErrSymlink) || errors.Is(err, ErrNotFound) {
				refused++
			} else {
				t.Errorf("read %d: unexpected error %v", i, err)
			}
		}
		stop.Store(true)
		wg.Wait()
		t.Logf("%d reads succeeded, %d refused", ok, refused)
		fx.checkSecret(t)
	})
}

package microvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"threadbox/infra/sandbox/microvm/guestinit"
)

// Warm VMs mount the sandbox image's root filesystem from a read-only
// erofs image of its folder, a block device of theirs, rather than over
// 9p: QEMU saves a VM with a block device's file system mounted (not with
// a 9p share), so the template of warm VMs holds the root mounted, and
// the shell and libraries its warm-up read in its page cache; no copy
// restored from it mounts the root or reads them again. Every VM opens
// the one image read-only; the guest's writes go to its own tmpfs mounts
// and the container's folders, as over 9p.
//
// The image is the file Config.RootImage names, made from the root
// filesystem folder with mkfs.erofs (erofs-utils) when it is missing:
// by default beside the folder, as <folder>.erofs, so that it is made
// once per root filesystem (the image cache keeps a folder per recipe).
// Without it (no mkfs.erofs, a folder beside which nothing can be
// written) warm VMs share the root over 9p as cold VMs do, and the log
// says why.

// rootImageOff is Config.RootImage's value that keeps warm VMs' root on 9p.
const rootImageOff = "off"

// rootImagePath is where the image of the root filesystem folder rootfs
// is kept, as configured (setting), or beside the folder.
func rootImagePath(setting, rootfs string) string {
	if setting != "" {
		return setting
	}
	return strings.TrimRight(rootfs, "/") + ".erofs"
}

// rootImage returns the path of the root filesystem's image, made on the
// first call that finds none; "" with the reason when warm VMs cannot
// have one. A failure is remembered: the image is not tried again.
func (b *Backend) rootImage(ctx context.Context) (string, error) {
	b.rootImgMu.Lock()
	defer b.rootImgMu.Unlock()
	if b.rootImg != "" || b.rootImgErr != nil {
		return b.rootImg, b.rootImgErr
	}
	if b.cfg.RootImage == rootImageOff {
		b.rootImgErr = errors.New("the root filesystem's image is turned off (MICROVM_ROOT_IMAGE=off)")
		return "", b.rootImgErr
	}
	path := rootImagePath(b.cfg.RootImage, b.rootfs)
	if strings.Contains(path, ",") {
		b.rootImgErr = fmt.Errorf("root filesystem image %q: QEMU's options cannot hold a comma", path)
		return "", b.rootImgErr
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		b.rootImg = path
		return path, nil
	}
	start := time.Now()
	// The image serves every warm VM after this one: it is made to the
	// end even when this caller stops waiting.
	if err := makeRootImage(context.WithoutCancel(ctx), b.rootfs, path); err != nil {
		b.rootImgErr = err
		b.log.Warn("no root filesystem image; warm VMs share the root over 9p", "cause", err.Error())
		return "", err
	}
	b.log.Info("root filesystem image made", "image", path, "took", time.Since(start).Round(time.Millisecond).String())
	b.rootImg = path
	return path, nil
}

// warmRoot returns where warm VMs' root filesystem comes from: its image
// (guestinit.RootImage and the image's path) where there is one, else the
// shared folder (guestinit.RootShared). A template and every copy of it
// ask here, so that they agree.
func (b *Backend) warmRoot(ctx context.Context) (root, image string) {
	if img, err := b.rootImage(ctx); err == nil {
		return guestinit.RootImage, img
	}
	return guestinit.RootShared, ""
}

// makeRootImage writes an erofs image of the folder rootfs to path, by way
// of a file of its own beside it, renamed into place once whole (another
// backend or process may be making the same image).
func makeRootImage(ctx context.Context, rootfs, path string) error {
	mkfs, err := exec.LookPath("mkfs.erofs")
	if err != nil {
		return fmt.Errorf("root filesystem image: no mkfs.erofs (erofs-utils): %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("root filesystem image: %w", err)
	}
	tmp := f.Name()
	_ = f.Close()
	out, err := exec.CommandContext(ctx, mkfs, "--quiet", tmp, rootfs).CombinedOutput()
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("root filesystem image %s: %w: %s", path, err, strings.TrimSpace(string(out)))
	}
	return nil
}

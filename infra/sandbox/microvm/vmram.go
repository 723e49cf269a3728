package microvm

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"threadbox/infra/sparse"
)

// The RAM of a VM whose running state can be checkpointed: a memfd of
// this process, which QEMU maps shared (as a memory file named by its
// descriptor, /dev/fd/N), and so can its virtiofsd processes. QEMU leaves
// it out of its saved state (x-ignore-shared), and a checkpoint copies
// only its pages that hold data (SEEK_DATA): a guest's untouched RAM
// costs neither time nor space, and is never touched by the copy. (With
// the RAM in QEMU's migration stream instead, QEMU reads every page of a
// shared memory to find the zero ones, which made a memfd allocate the
// whole RAM of the VM, and loading the stream took seconds under
// emulation.) The memfd ends with the VM and has no name on any file
// system, so nothing of it can be left behind.

// vmRAM is one VM's memory file.
type vmRAM struct {
	f *os.File
}

// newVMRAM makes a VM's memory file, empty.
func newVMRAM(name string) (*vmRAM, error) {
	fd, err := unix.MemfdCreate("threadbox-vm-"+name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memory file: %w", err)
	}
	return &vmRAM{f: os.NewFile(uintptr(fd), "vm-ram")}, nil
}

// fill copies the checkpoint's RAM file from into the memory file in the
// background and gives the copy's result on the channel. A restore starts
// QEMU and its virtiofsd processes meanwhile (the copy took 55–60 ms of a
// 0.5 s restore here): QEMU maps the file but touches none of it until it
// loads the saved state, which waits for the copy. The memory file has
// its size before fill returns: QEMU refuses one smaller than the VM's
// RAM. A Close during the copy fails it.
func (r *vmRAM) fill(from string) <-chan error {
	done := make(chan error, 1)
	src, err := os.Open(from)
	if err == nil {
		var fi os.FileInfo
		if fi, err = src.Stat(); err == nil {
			err = r.f.Truncate(fi.Size())
		}
		if err != nil {
			src.Close()
		}
	}
	if err != nil {
		done <- fmt.Errorf("the checkpoint's RAM: %w", err)
		return done
	}
	go func() {
		defer src.Close()
		if err := sparse.Copy(r.f, src); err != nil {
			done <- fmt.Errorf("the checkpoint's RAM: %w", err)
			return
		}
		done <- nil
	}()
	return done
}

// forQEMU returns a descriptor of the memory file for QEMU to inherit.
func (r *vmRAM) forQEMU() (*os.File, error) {
	fd, err := unix.Dup(int(r.f.Fd()))
	if err != nil {
		return nil, fmt.Errorf("memory file: %w", err)
	}
	return os.NewFile(uintptr(fd), "vm-ram"), nil
}

// saveTo copies the memory file's pages that hold data to a new file at
// path, of the same size; the VM must be paused.
func (r *vmRAM) saveTo(path string) error {
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("save the RAM: %w", err)
	}
	if err := sparse.Copy(dst, r.f); err != nil {
		dst.Close()
		return fmt.Errorf("save the RAM: %w", err)
	}
	if err := dst.Close(); err != nil {
		return fmt.Errorf("save the RAM: %w", err)
	}
	return nil
}

// Close ends this process's handle of the memory file; it is freed when
// QEMU's ends too. A nil r does nothing.
func (r *vmRAM) Close() {
	if r != nil {
		_ = r.f.Close()
	}
}

// Package sparsetest makes sparse files for tests and measures what they
// take on disk: the tests that prove a file is read, sent and copied by
// its data, never its size, share one way to make such a file.
package sparsetest

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// Piece is data written at an offset of a file.
type Piece struct {
	Off  int64
	Data string
}

// Make makes the file at path of size bytes holding the pieces, written
// in order, and nothing else written. Where the file system cannot hold
// it sparse the test is skipped, or fails under CI=true: CI's file
// systems keep sparse files, so a test that could not prove its point
// there must not pass unseen.
func Make(t testing.TB, path string, size int64, pieces ...Piece) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		unable(t, "this file system holds no file of %d bytes: %v", size, err)
	}
	for _, p := range pieces {
		if _, err := f.WriteAt([]byte(p.Data), p.Off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if Allocated(t, path) > 1<<20 {
		unable(t, "this file system does not keep %s sparse", path)
	}
}

func unable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// Want returns the content of a file of size bytes holding the pieces.
func Want(size int64, pieces ...Piece) []byte {
	b := make([]byte, size)
	for _, p := range pieces {
		copy(b[p.Off:], p.Data)
	}
	return b
}

// Allocated returns the bytes the file at path takes on its disk.
func Allocated(t testing.TB, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// AllocatedFile returns the bytes the open file f takes on its disk (an
// unlinked file has no path).
func AllocatedFile(t testing.TB, f *os.File) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// Within runs fn, failing the test when it has not returned after d: a
// bound that only tells a hang (a copy or hash reading a file's holes),
// far above what fn takes.
func Within(t testing.TB, d time.Duration, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(d):
		t.Fatalf("not done after %v", d)
	}
}

// BufAt is an io.WriterAt over a byte slice.
type BufAt []byte

// WriteAt copies p into b at off.
func (b BufAt) WriteAt(p []byte, off int64) (int, error) { return copy(b[off:], p), nil }

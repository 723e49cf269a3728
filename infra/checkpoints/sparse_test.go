package checkpoints

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// TestDecodeSparseRefusesWhatItDidNotWrite: a sparse file's blob decodes
// into the file it was encoded from, and one that is not whole or well
// formed is refused, never written beyond the file's size.
func TestDecodeSparseRefusesWhatItDidNotWrite(t *testing.T) {
	dir := t.TempDir()
	u64 := func(vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.BigEndian.AppendUint64(b, v)
		}
		return b
	}
	blob := func(parts ...[]byte) []byte { return bytes.Join(append([][]byte{[]byte(sparseMagic)}, parts...), nil) }
	decode := func(b []byte, size int64) ([]byte, error) {
		t.Helper()
		f, err := os.CreateTemp(dir, "out")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := decodeSparse(f, bytes.NewReader(b), size); err != nil {
			return nil, err
		}
		return os.ReadFile(f.Name())
	}

	src := filepath.Join(dir, "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("data"), 500000); err != nil {
		t.Fatal(err)
	}
	var enc bytes.Buffer
	if err := encodeSparse(&enc, f, 1<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decode(enc.Bytes(), 1<<20); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("round trip: %d bytes, %v", len(got), err)
	}

	for name, b := range map[string][]byte{
		"not a sparse blob":      []byte("plain content of a file, long enough to be read"),
		"another size":           blob(u64(99), u64(99, 0)),
		"no end":                 blob(u64(100), u64(0, 2), []byte("ab")),
		"an extent cut short":    blob(u64(100), u64(0, 4), []byte("ab")),
		"an extent past the end": blob(u64(100), u64(98, 4), []byte("abcd"), u64(100, 0)),
		"extents out of order":   blob(u64(100), u64(10, 2), []byte("ab"), u64(5, 2), []byte("cd"), u64(100, 0)),
		"an empty extent":        blob(u64(100), u64(10, 0), u64(100, 0)),
		"an overflowing extent":  blob(u64(100), u64(10, 1<<63), u64(100, 0)),
		"bytes after the end":    blob(u64(100), u64(100, 0), []byte("x")),
	} {
		if _, err := decode(b, 100); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if got, err := decode(blob(u64(100), u64(10, 2), []byte("ab"), u64(100, 0)), 100); err != nil || len(got) != 100 || string(got[10:12]) != "ab" {
		t.Errorf("a well formed blob: %q, %v", got, err)
	}
}

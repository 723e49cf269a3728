package files

import (
	"bytes"
	"io"
	"testing"

	"threadbox/app/admin"
	"threadbox/domain/file/filetype"
)

// The org policy source serves the Policies port. The use cases' tests run
// over the real confined store in infra/fsroot (files_test.go there): app
// tests never import infra.
var _ Policies = (*admin.Service)(nil)

func TestHeadReaderKeepsFirstBytes(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100)
	h := &headReader{r: bytes.NewReader(data)}
	got, err := io.ReadAll(io.LimitReader(h, 1000))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatal("data changed in passing")
	}
	if !bytes.Equal(h.buf, data[:filetype.SniffLen]) {
		t.Errorf("head = %d bytes", len(h.buf))
	}
}

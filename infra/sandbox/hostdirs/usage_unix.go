//go:build unix

package hostdirs

import (
	"os"
	"syscall"
)

// allocated returns the bytes a (sparse) file takes on disk.
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}

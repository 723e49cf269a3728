//go:build !unix

package hostdirs

import "os"

// allocated returns the file's size: without Unix stat blocks a sparse
// file counts whole.
func allocated(fi os.FileInfo) int64 { return fi.Size() }

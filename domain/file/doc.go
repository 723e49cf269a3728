// Package file holds the rules about sandbox files that need no I/O: the file
// id codec, upload key validation, the sandbox mount table and
// the error values every layer uses to talk about files.
package file

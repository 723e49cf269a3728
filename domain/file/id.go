package file

import (
	"encoding/base64"
	"errors"
	"path"
	"strings"
)

// MaxPathLen caps the length in bytes of a sandbox path (and so of a file id).
const MaxPathLen = 4096

// ErrInvalidID reports a file id that is not the canonical encoding of an
// absolute, clean sandbox path.
var ErrInvalidID = errors.New("invalid file id")

var idEncoding = base64.RawURLEncoding.Strict()

// EncodeID returns the file id of an absolute sandbox path: base64url
// (RFC 4648 §5) without padding.
func EncodeID(sandboxPath string) string {
	return idEncoding.EncodeToString([]byte(sandboxPath))
}

// DecodeID returns the sandbox path a file id names. It refuses every
// non-canonical form: padding, the standard alphabet, whitespace, non-zero
// trailing bits, and ids whose path is not absolute and clean.
func DecodeID(id string) (string, error) {
	if id == "" || len(id) > (MaxPathLen*4+2)/3 {
		return "", ErrInvalidID
	}
	// The decoder skips CR and LF; the canonical form has none.
	if strings.ContainsAny(id, "\r\n") {
		return "", ErrInvalidID
	}
	b, err := idEncoding.DecodeString(id)
	if err != nil {
		return "", ErrInvalidID
	}
	p := string(b)
	if !path.IsAbs(p) || path.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
		return "", ErrInvalidID
	}
	if EncodeID(p) != id {
		return "", ErrInvalidID
	}
	return p, nil
}

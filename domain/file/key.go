package file

import (
	"errors"
	"net/url"
	"strings"
	"unicode/utf8"

	"threadbox/domain/sandbox"
)

// MaxKeyLen caps the length in bytes of an upload key.
const MaxKeyLen = 1024

// maxSegmentLen is the longest name most filesystems accept.
const maxSegmentLen = 255

// OutputsKeyPrefix starts the keys that land in the outputs folder.
const OutputsKeyPrefix = "outputs/"

// ErrInvalidKey reports an upload key that breaks the key rules.
var ErrInvalidKey = errors.New("invalid key")

// ValidateKey checks an upload key (the `path=` of a POST or the key of a
// PUT): UTF-8, relative, at most MaxKeyLen bytes, no empty, "." or ".."
// segment, no backslash, NUL or other control character, not ending in
// "/", and none of these hidden behind percent-encoding (%2e%2e, .%2e, %2F,
// %5C, %00). A key is a file name the API shows in JSON and records in the
// database, so bytes that are not UTF-8 are refused before anything is
// written: JSON would show them as U+FFFD, and PostgreSQL refuses them.
func ValidateKey(key string) error {
	if !utf8.ValidString(key) {
		return ErrInvalidKey
	}
	if err := checkKey(key); err != nil {
		return err
	}
	lower := strings.ToLower(key)
	for _, enc := range []string{"%2f", "%5c", "%00"} {
		if strings.Contains(lower, enc) {
			return ErrInvalidKey
		}
	}
	// Check every layer of percent-decoding, so that a key decoded once more
	// by some other component still obeys the rules.
	for cur := key; strings.Contains(cur, "%"); {
		dec, err := url.PathUnescape(cur)
		if err != nil || dec == cur {
			break // a literal '%' that escapes nothing
		}
		if err := checkKey(dec); err != nil {
			return err
		}
		cur = dec
	}
	return nil
}

func checkKey(key string) error {
	if key == "" || len(key) > MaxKeyLen || key[0] == '/' || strings.HasSuffix(key, "/") {
		return ErrInvalidKey
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return ErrInvalidKey
		}
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." || len(seg) > maxSegmentLen {
			return ErrInvalidKey
		}
	}
	return nil
}

// KeyLocation maps a valid key to its mount and path within the mount: a key
// starting "outputs/" goes to the outputs folder, any other to uploads.
func KeyLocation(key string) (Mount, string, error) {
	if err := ValidateKey(key); err != nil {
		return "", "", err
	}
	if rest, ok := strings.CutPrefix(key, OutputsKeyPrefix); ok {
		return Outputs, rest, nil
	}
	return Uploads, key, nil
}

// KeyPath returns the absolute sandbox path of a valid key.
func KeyPath(key string) (string, error) {
	m, rel, err := KeyLocation(key)
	if err != nil {
		return "", err
	}
	if m == Outputs {
		return sandbox.OutputsDir + "/" + rel, nil
	}
	return sandbox.UploadsDir + "/" + rel, nil
}

// KeyOf returns the key of a file at rel within mount m, the inverse of
// KeyLocation; only uploads and outputs have keys.
func KeyOf(m Mount, rel string) (string, bool) {
	switch m {
	case Uploads:
		return rel, true
	case Outputs:
		return OutputsKeyPrefix + rel, true
	}
	return "", false
}

// Package id makes opaque, unguessable, URL- and path-safe identifiers.
package id

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
)

var enc = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// New returns prefix + "_" + 26 random lower-case characters (130 bits).
func New(prefix string) string {
	b := make([]byte, 17)
	if _, err := rand.Read(b); err != nil {
		panic("id: no randomness: " + err.Error())
	}
	return prefix + "_" + strings.ToLower(enc.EncodeToString(b))[:26]
}

// Package id makes opaque, unguessable, URL- and path-safe identifiers.
package id

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
	"sync"
)

var enc = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// New returns prefix + "_" + 26 random lower-case characters (130 bits).
func New(prefix string) string {
	var b [17]byte
	read(b[:])
	return prefix + "_" + strings.ToLower(enc.EncodeToString(b[:]))[:26]
}

// Text returns 26 random characters of the standard base32 alphabet (130
// bits), as crypto/rand.Text does.
func Text() string {
	var b [17]byte
	read(b[:])
	return base32.StdEncoding.EncodeToString(b[:])[:26]
}

// pool holds random bytes of crypto/rand read ahead, so that an identifier
// costs no system call of its own (every request makes two or more); bytes
// are wiped from it as they are handed out.
var pool struct {
	sync.Mutex
	buf [1024]byte
	off int
}

func init() { pool.off = len(pool.buf) }

// read fills b, len(b) <= len(pool.buf), with random bytes.
func read(b []byte) {
	pool.Lock()
	defer pool.Unlock()
	if pool.off+len(b) > len(pool.buf) {
		if _, err := rand.Read(pool.buf[:]); err != nil {
			panic("id: no randomness: " + err.Error())
		}
		pool.off = 0
	}
	n := copy(b, pool.buf[pool.off:])
	clear(pool.buf[pool.off : pool.off+n])
	pool.off += n
}

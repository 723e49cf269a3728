package c2pa

import (
	"encoding/binary"
	"encoding/hex"
)

// JUMBF (ISO 19566-5) box types of a C2PA manifest store. Each is the
// 16-byte type UUID of a superbox's description box.
var (
	uuidStore     = mustUUID("6332706100110010800000AA00389B71") // c2pa
	uuidManifest  = mustUUID("63326D6100110010800000AA00389B71") // c2ma
	uuidAssertion = mustUUID("6332617300110010800000AA00389B71") // c2as
	uuidClaim     = mustUUID("6332636C00110010800000AA00389B71") // c2cl
	uuidSignature = mustUUID("6332637300110010800000AA00389B71") // c2cs
	uuidCBOR      = mustUUID("63626F7200110010800000AA00389B71") // cbor
)

func mustUUID(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		panic("c2pa: bad JUMBF type " + s)
	}
	return b
}

// box is an ISO BMFF box: a 32-bit size, a four-character type and its
// payload.
func box(typ string, payload ...[]byte) []byte {
	n := 8
	for _, p := range payload {
		n += len(p)
	}
	out := make([]byte, 8, n)
	binary.BigEndian.PutUint32(out, uint32(n))
	copy(out[4:], typ)
	for _, p := range payload {
		out = append(out, p...)
	}
	return out
}

// superboxPayload is the payload of a JUMBF superbox: its description box
// (type UUID, toggles "requestable, label present", the NUL-terminated
// label) and its content boxes. A C2PA hashed URI to a box is the SHA-256
// of this payload, without the superbox's own size and type.
func superboxPayload(typ []byte, label string, content ...[]byte) []byte {
	desc := make([]byte, 0, 17+len(label)+1)
	desc = append(desc, typ...)
	desc = append(desc, 3)
	desc = append(desc, label...)
	desc = append(desc, 0)
	parts := append([][]byte{box("jumd", desc)}, content...)
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// superbox is a whole JUMBF superbox ("jumb").
func superbox(typ []byte, label string, content ...[]byte) []byte {
	return box("jumb", superboxPayload(typ, label, content...))
}

package c2pa

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/fxamacker/cbor/v2"
	"github.com/veraison/go-cose"
)

// Assertion labels and the IPTC digital source type of generated media.
const (
	labelActions    = "c2pa.actions.v2"
	labelDataHash   = "c2pa.hash.data"
	labelBMFFHash   = "c2pa.hash.bmff.v3"
	labelThreadbox  = "io.threadbox.provenance"
	labelClaim      = "c2pa.claim.v2"
	labelSignature  = "c2pa.signature"
	labelAssertions = "c2pa.assertions"

	// SourceAlgorithmic is the IPTC digital source type of media made by
	// an algorithm rather than sampled from the world or a trained model's
	// output: the file was written by a program (which a model wrote), not
	// drawn by the model itself.
	SourceAlgorithmic = "http://cv.iptc.org/newscodes/digitalsourcetype/algorithmicMedia"
)

// Provenance is what the threadbox assertion says about a file: who made
// it, where, and the SHA-256 of the file as the code wrote it.
type Provenance struct {
	Org       string
	Thread    string // the thread id, or "" for a Files API container
	Container string // the container (scope) id, when there is no thread
	ToolUseID string // the tool call that wrote the file, when known
	Path      string // the file's path in the sandbox
}

// exclusion is a byte range a data hash leaves out.
type exclusion struct {
	Start  int64 `cbor:"start"`
	Length int64 `cbor:"length"`
}

type dataHash struct {
	Exclusions []exclusion `cbor:"exclusions"`
	Name       string      `cbor:"name"`
	Alg        string      `cbor:"alg"`
	Hash       []byte      `cbor:"hash"`
	Pad        []byte      `cbor:"pad"`
}

// bmffHash is the hard binding of a BMFF file: the SHA-256 of its
// top-level boxes but the excluded ones, each box's offset hashed before
// it.
type bmffHash struct {
	Exclusions []bmffExclusion `cbor:"exclusions"`
	Alg        string          `cbor:"alg"`
	Hash       []byte          `cbor:"hash"`
	Name       string          `cbor:"name"`
}

// bmffExclusion names top-level boxes left out of a BMFF hash: by path,
// and when Data is set only those whose bytes at an offset match.
type bmffExclusion struct {
	XPath string        `cbor:"xpath"`
	Data  []bmffDataMap `cbor:"data,omitempty"`
}

type bmffDataMap struct {
	Offset int64  `cbor:"offset"`
	Value  []byte `cbor:"value"`
}

// bmffExclusions are the boxes a BMFF hash leaves out, as C2PA asks:
// the C2PA box (a uuid box whose type is the C2PA UUID), ftyp, mfra,
// free and skip.
var bmffExclusions = []bmffExclusion{
	{XPath: "/uuid", Data: []bmffDataMap{{Offset: 8, Value: c2paBoxUUID}}},
	{XPath: "/ftyp"}, {XPath: "/mfra"}, {XPath: "/free"}, {XPath: "/skip"},
}

type action struct {
	Action            string `cbor:"action"`
	DigitalSourceType string `cbor:"digitalSourceType"`
	SoftwareAgent     any    `cbor:"softwareAgent,omitempty"`
}

type actions struct {
	Actions []action `cbor:"actions"`
}

type threadboxAssertion struct {
	Org       string `cbor:"org" json:"org"`
	Thread    string `cbor:"thread,omitempty" json:"thread,omitempty"`
	Container string `cbor:"container,omitempty" json:"container,omitempty"`
	ToolUseID string `cbor:"tool_use_id,omitempty" json:"tool_use_id,omitempty"`
	Path      string `cbor:"path,omitempty" json:"path,omitempty"`
	SHA256    string `cbor:"sha256" json:"sha256"`
}

type hashedURI struct {
	URL  string `cbor:"url"`
	Hash []byte `cbor:"hash"`
}

type generatorInfo struct {
	Name    string `cbor:"name"`
	Version string `cbor:"version"`
}

type claim struct {
	InstanceID        string        `cbor:"instanceID"`
	GeneratorInfo     generatorInfo `cbor:"claim_generator_info"`
	Signature         string        `cbor:"signature"`
	CreatedAssertions []hashedURI   `cbor:"created_assertions"`
	Alg               string        `cbor:"alg"`
}

// manifestInput is what one manifest is built from.
type manifestInput struct {
	label      string // urn:c2pa:<uuid>
	instanceID string
	version    string
	dataHash   []byte // SHA-256 of the asset outside the exclusion
	written    []byte // SHA-256 of the file as written
	exclusion  exclusion
	pad        int  // zero bytes in the data hash's pad, to even a length
	bmff       bool // the binding is a BMFF hash (dataHash holds it)
	// final is the signing whose store is sent (a timestamp is asked for
	// then; before, its room is kept with padding).
	final     bool
	tokenRoom int // bytes kept for a timestamp token, with a TSA
	prov      Provenance
}

// buildStore returns a signed C2PA manifest store (a JUMBF superbox)
// holding one manifest: the actions, hard binding and threadbox assertions,
// the claim over them and its COSE_Sign1 signature.
func (s *Signer) buildStore(ctx context.Context, in manifestInput) ([]byte, error) {
	enc := s.enc
	type assertion struct {
		label string
		value any
	}
	binding := assertion{labelDataHash, dataHash{
		Exclusions: []exclusion{in.exclusion}, Name: "jumbf manifest", Alg: "sha256",
		Hash: in.dataHash, Pad: make([]byte, in.pad),
	}}
	if in.bmff {
		binding = assertion{labelBMFFHash, bmffHash{Exclusions: bmffExclusions, Alg: "sha256", Hash: in.dataHash, Name: "jumbf manifest"}}
	}
	list := []assertion{
		{labelActions, actions{Actions: []action{{
			Action:            "c2pa.created",
			DigitalSourceType: SourceAlgorithmic,
			SoftwareAgent:     generatorInfo{Name: "threadbox", Version: in.version},
		}}}},
		binding,
		{labelThreadbox, threadboxAssertion{
			Org: in.prov.Org, Thread: in.prov.Thread, Container: in.prov.Container,
			ToolUseID: in.prov.ToolUseID, Path: in.prov.Path, SHA256: fmt.Sprintf("%x", in.written),
		}},
	}
	base := "self#jumbf=/c2pa/" + in.label
	var boxes [][]byte
	var refs []hashedURI
	for _, a := range list {
		data, err := enc.Marshal(a.value)
		if err != nil {
			return nil, fmt.Errorf("c2pa: encode %s: %w", a.label, err)
		}
		payload := superboxPayload(uuidCBOR, a.label, box("cbor", data))
		sum := sha256.Sum256(payload)
		boxes = append(boxes, box("jumb", payload))
		refs = append(refs, hashedURI{URL: base + "/" + labelAssertions + "/" + a.label, Hash: sum[:]})
	}
	c := claim{
		InstanceID:        in.instanceID,
		GeneratorInfo:     generatorInfo{Name: "threadbox", Version: in.version},
		Signature:         base + "/" + labelSignature,
		CreatedAssertions: refs,
		Alg:               "sha256",
	}
	claimBytes, err := enc.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("c2pa: encode claim: %w", err)
	}
	sig, err := s.sign(ctx, claimBytes, in.final, in.tokenRoom)
	if err != nil {
		return nil, err
	}
	manifest := superbox(uuidManifest, in.label,
		superbox(uuidAssertion, labelAssertions, boxes...),
		superbox(uuidClaim, labelClaim, box("cbor", claimBytes)),
		superbox(uuidSignature, labelSignature, box("cbor", sig)),
	)
	return superbox(uuidStore, "c2pa", manifest), nil
}

// sign returns the tagged COSE_Sign1 (ES256) over the claim, detached: the
// claim is the payload signed but not carried (before final, a stand-in
// of the same length). The protected header names
// the algorithm and carries the certificate chain (x5chain). With a
// timestamp authority, the unprotected header keeps room bytes for its
// token, padded ("pad") to the same length whether the token is there
// (final) or not, so the manifest's size is known before the token is.
func (s *Signer) sign(ctx context.Context, claimBytes []byte, final bool, room int) ([]byte, error) {
	var chain any = s.chain[0]
	if len(s.chain) > 1 {
		chain = s.chain
	}
	msg := cose.NewSign1Message()
	msg.Headers.Protected.SetAlgorithm(cose.AlgorithmES256)
	msg.Headers.Protected[cose.HeaderLabelX5Chain] = chain
	if final {
		msg.Payload = claimBytes
		var signer cose.Signer = s.cose
		if s.hook != nil {
			signer = &hookSigner{ctx: ctx, hook: s.hook, pub: s.hookKey}
		}
		if err := msg.Sign(rand.Reader, nil, signer); err != nil {
			return nil, fmt.Errorf("c2pa: sign claim: %w", err)
		}
		msg.Payload = nil
	} else {
		// Only the length of a store built to settle the manifest's size
		// counts, and an ES256 signature is always 64 bytes: the key (a
		// hook's perhaps remote) signs the final claim alone.
		msg.Signature = make([]byte, 64)
	}
	if s.tsa == nil {
		return marshalSign1(msg)
	}
	var token []byte
	if final {
		data, err := countersignData(msg)
		if err != nil {
			return nil, err
		}
		if token, err = s.tsa.Stamp(ctx, data); err != nil {
			return nil, err
		}
		if len(token) > room {
			return nil, &tokenTooLarge{n: len(token)}
		}
		msg.Headers.Unprotected["sigTst2"] = map[string]any{"tstTokens": []any{map[string]any{"val": token}}}
	}
	// The header without a token, padded to the room, is as long as the
	// header with one padded to the room less the token's encoding.
	base, err := marshalSign1(msg)
	if err != nil {
		return nil, err
	}
	target := len(base) + room + 64
	if final {
		if target, err = s.paddedLen(msg, room); err != nil {
			return nil, err
		}
	}
	return padTo(msg, target)
}

// paddedLen is the length of msg signed without a token, padded: what
// the final signature, with its token, is padded to.
func (s *Signer) paddedLen(msg *cose.Sign1Message, room int) (int, error) {
	tok := msg.Headers.Unprotected["sigTst2"]
	delete(msg.Headers.Unprotected, "sigTst2")
	defer func() { msg.Headers.Unprotected["sigTst2"] = tok }()
	base, err := marshalSign1(msg)
	if err != nil {
		return 0, err
	}
	return len(base) + room + 64, nil
}

// padTo adds a "pad" byte string to msg's unprotected header so that it
// encodes to n bytes.
func padTo(msg *cose.Sign1Message, n int) ([]byte, error) {
	msg.Headers.Unprotected["pad"] = []byte{}
	out, err := marshalSign1(msg)
	if err != nil {
		return nil, err
	}
	// The pad's own length prefix grows with it: try the lengths that
	// could land on n.
	need := n - len(out)
	for extra := 0; extra <= 8 && need-extra >= 0; extra++ {
		msg.Headers.Unprotected["pad"] = make([]byte, need-extra)
		if out, err = marshalSign1(msg); err != nil {
			return nil, err
		}
		if len(out) == n {
			return out, nil
		}
	}
	return nil, errors.New("c2pa: the signature could not be padded to its size")
}

func marshalSign1(msg *cose.Sign1Message) ([]byte, error) {
	out, err := msg.MarshalCBOR()
	if err != nil {
		return nil, fmt.Errorf("c2pa: encode signature: %w", err)
	}
	return out, nil
}

// countersignData is what a timestamp of a claim's signature is over (C2PA
// sigTst2): the COSE countersignature structure of the signature,
// ["CounterSignature", protected header, h”, bstr(bstr(signature))].
func countersignData(msg *cose.Sign1Message) ([]byte, error) {
	prot, err := msg.Headers.MarshalProtected()
	if err != nil {
		return nil, fmt.Errorf("c2pa: encode protected header: %w", err)
	}
	sig, err := cbor.Marshal(msg.Signature)
	if err != nil {
		return nil, fmt.Errorf("c2pa: encode signature: %w", err)
	}
	out, err := cbor.Marshal([]any{"CounterSignature", cbor.RawMessage(prot), []byte{}, sig})
	if err != nil {
		return nil, fmt.Errorf("c2pa: encode countersignature: %w", err)
	}
	return out, nil
}

// Room kept for a timestamp token before one was seen, and the margin over
// the largest seen (a token's size varies by a few bytes: time, nonce).
const (
	initialTokenRoom = 6 << 10
	tokenMargin      = 256
)

// tokenTooLarge is a timestamp token longer than the room kept for it.
type tokenTooLarge struct{ n int }

func (e *tokenTooLarge) Error() string {
	return fmt.Sprintf("c2pa: timestamp token of %d bytes outgrew its room", e.n)
}

// newEncoder returns the CBOR encoder of manifests: definite lengths and
// the shortest integer forms.
func newEncoder() (cbor.EncMode, error) {
	return cbor.EncOptions{Sort: cbor.SortNone}.EncMode()
}

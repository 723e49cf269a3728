package c2pa

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"

	"github.com/fxamacker/cbor/v2"
	"github.com/veraison/go-cose"
)

// Assertion labels and the IPTC digital source type of generated media.
const (
	labelActions    = "c2pa.actions.v2"
	labelDataHash   = "c2pa.hash.data"
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
	pad        int // zero bytes in the data hash's pad, to even a length
	prov       Provenance
}

// buildStore returns a signed C2PA manifest store (a JUMBF superbox)
// holding one manifest: the actions, data hash and threadbox assertions,
// the claim over them and its COSE_Sign1 signature.
func (s *Signer) buildStore(in manifestInput) ([]byte, error) {
	enc := s.enc
	type assertion struct {
		label string
		value any
	}
	list := []assertion{
		{labelActions, actions{Actions: []action{{
			Action:            "c2pa.created",
			DigitalSourceType: SourceAlgorithmic,
			SoftwareAgent:     generatorInfo{Name: "threadbox", Version: in.version},
		}}}},
		{labelDataHash, dataHash{
			Exclusions: []exclusion{in.exclusion}, Name: "jumbf manifest", Alg: "sha256",
			Hash: in.dataHash, Pad: make([]byte, in.pad),
		}},
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
	sig, err := s.sign(claimBytes)
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
// claim is the payload signed but not carried. The protected header names
// the algorithm and carries the certificate chain (x5chain).
func (s *Signer) sign(claimBytes []byte) ([]byte, error) {
	var chain any = s.chain[0]
	if len(s.chain) > 1 {
		chain = s.chain
	}
	msg := cose.NewSign1Message()
	msg.Headers.Protected.SetAlgorithm(cose.AlgorithmES256)
	msg.Headers.Protected[cose.HeaderLabelX5Chain] = chain
	msg.Payload = claimBytes
	if err := msg.Sign(rand.Reader, nil, s.cose); err != nil {
		return nil, fmt.Errorf("c2pa: sign claim: %w", err)
	}
	msg.Payload = nil
	out, err := msg.MarshalCBOR()
	if err != nil {
		return nil, fmt.Errorf("c2pa: encode signature: %w", err)
	}
	return out, nil
}

// newEncoder returns the CBOR encoder of manifests: definite lengths and
// the shortest integer forms.
func newEncoder() (cbor.EncMode, error) {
	return cbor.EncOptions{Sort: cbor.SortNone}.EncMode()
}

package c2pa

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"net/http"
)

// An RFC 3161 timestamp authority countersigns the claim's signature, so a
// validator can check the signing certificate at the time of signing
// rather than at validation time. The token goes in the COSE_Sign1's
// unprotected header as sigTst2 (C2PA's timestamp of the signature, for
// claims of version 2): {"tstTokens": [{"val": token}]}, the token's
// message imprint the SHA-256 of the COSE countersignature structure
// ["CounterSignature", protected header, h'', bstr(signature)].

// ASN.1 object identifiers of timestamp requests and tokens.
var (
	oidSHA256     = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}
	oidSignedData = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2}
	oidTSTInfo    = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 16, 1, 4}
)

type algorithmIdentifier struct {
	Algorithm  asn1.ObjectIdentifier
	Parameters asn1.RawValue `asn1:"optional"`
}

type messageImprint struct {
	HashAlgorithm algorithmIdentifier
	HashedMessage []byte
}

// timeStampReq is RFC 3161's TimeStampReq (no policy, no extensions).
type timeStampReq struct {
	Version        int
	MessageImprint messageImprint
	Nonce          *big.Int `asn1:"optional"`
	CertReq        bool     `asn1:"optional"`
}

type pkiStatusInfo struct {
	Status       int
	StatusString []asn1.RawValue `asn1:"optional"`
	FailInfo     asn1.BitString  `asn1:"optional"`
}

// timeStampResp is RFC 3161's TimeStampResp: the token is a CMS
// ContentInfo, kept as it came.
type timeStampResp struct {
	Status pkiStatusInfo
	Token  asn1.RawValue `asn1:"optional"`
}

type contentInfo struct {
	ContentType asn1.ObjectIdentifier
	Content     asn1.RawValue `asn1:"explicit,tag:0"`
}

type encapContentInfo struct {
	EContentType asn1.ObjectIdentifier
	EContent     []byte `asn1:"explicit,tag:0"`
}

// signedDataHead is the start of a CMS SignedData, up to the content
// (the fields after it are not read).
type signedDataHead struct {
	Version          int
	DigestAlgorithms asn1.RawValue
	EncapContentInfo encapContentInfo
}

// TSA asks an RFC 3161 timestamp authority over HTTP for tokens.
type TSA struct{ endpoint }

// NewTSA returns a client of the timestamp authority at url; a nil client
// is one with a 10-second timeout.
func NewTSA(url string, client *http.Client) *TSA {
	return &TSA{newEndpoint(url, client)}
}

// maxTSAResponse bounds a timestamp response read.
const maxTSAResponse = 1 << 20

// Stamp returns a timestamp token (a DER CMS ContentInfo) over the
// SHA-256 of data. It checks that the authority granted it, and that the
// token's message imprint and nonce are the request's.
func (t *TSA) Stamp(ctx context.Context, data []byte) ([]byte, error) {
	sum := sha256.Sum256(data)
	nonce, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 63))
	if err != nil {
		return nil, fmt.Errorf("c2pa: timestamp nonce: %w", err)
	}
	req, err := asn1.Marshal(timeStampReq{
		Version:        1,
		MessageImprint: messageImprint{HashAlgorithm: algorithmIdentifier{Algorithm: oidSHA256, Parameters: asn1.NullRawValue}, HashedMessage: sum[:]},
		Nonce:          nonce,
		CertReq:        true,
	})
	if err != nil {
		return nil, fmt.Errorf("c2pa: timestamp request: %w", err)
	}
	body, err := t.post(ctx, "timestamp authority", "application/timestamp-query", req, maxTSAResponse)
	if err != nil {
		return nil, err
	}
	return parseTimeStampResp(body, sum[:], nonce)
}

// parseTimeStampResp returns the token of a granted response whose
// TSTInfo has the imprint and nonce asked for.
func parseTimeStampResp(body, imprint []byte, nonce *big.Int) ([]byte, error) {
	var r timeStampResp
	if rest, err := asn1.Unmarshal(body, &r); err != nil || len(rest) > 0 {
		return nil, fmt.Errorf("c2pa: timestamp response is not DER: %v", err)
	}
	if r.Status.Status != 0 && r.Status.Status != 1 {
		return nil, fmt.Errorf("c2pa: timestamp refused (status %d)", r.Status.Status)
	}
	if len(r.Token.FullBytes) == 0 {
		return nil, errors.New("c2pa: timestamp response without a token")
	}
	var ci contentInfo
	if _, err := asn1.Unmarshal(r.Token.FullBytes, &ci); err != nil || !ci.ContentType.Equal(oidSignedData) {
		return nil, fmt.Errorf("c2pa: timestamp token is not CMS signed data: %v", err)
	}
	var sd signedDataHead
	if _, err := asn1.Unmarshal(ci.Content.Bytes, &sd); err != nil || !sd.EncapContentInfo.EContentType.Equal(oidTSTInfo) {
		return nil, fmt.Errorf("c2pa: timestamp token holds no TSTInfo: %v", err)
	}
	// TSTInfo: version, policy, messageImprint, serialNumber, genTime,
	// then accuracy, ordering and nonce (the first untagged INTEGER).
	var seq asn1.RawValue
	if _, err := asn1.Unmarshal(sd.EncapContentInfo.EContent, &seq); err != nil || seq.Tag != asn1.TagSequence {
		return nil, fmt.Errorf("c2pa: timestamp TSTInfo is not a sequence: %v", err)
	}
	var fields []asn1.RawValue
	for rest := seq.Bytes; len(rest) > 0; {
		var v asn1.RawValue
		var err error
		if rest, err = asn1.Unmarshal(rest, &v); err != nil {
			return nil, fmt.Errorf("c2pa: timestamp TSTInfo: %w", err)
		}
		fields = append(fields, v)
	}
	var mi messageImprint
	if len(fields) < 5 {
		return nil, errors.New("c2pa: timestamp TSTInfo is too short")
	}
	if _, err := asn1.Unmarshal(fields[2].FullBytes, &mi); err != nil {
		return nil, fmt.Errorf("c2pa: timestamp message imprint: %w", err)
	}
	if !mi.HashAlgorithm.Algorithm.Equal(oidSHA256) || !bytes.Equal(mi.HashedMessage, imprint) {
		return nil, errors.New("c2pa: timestamp token is over another message")
	}
	for _, v := range fields[5:] {
		if v.Class == asn1.ClassUniversal && v.Tag == asn1.TagInteger {
			var n *big.Int
			if _, err := asn1.Unmarshal(v.FullBytes, &n); err == nil && n.Cmp(nonce) == 0 {
				return r.Token.FullBytes, nil
			}
			break
		}
	}
	return nil, errors.New("c2pa: timestamp token does not carry the request's nonce")
}

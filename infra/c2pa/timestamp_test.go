package c2pa

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"threadbox/infra/c2pa/c2patest"
)

// testTSA is an RFC 3161 timestamp authority on loopback: a root and a
// timestamping certificate it issued (EKU timeStamping, critical), which
// answers each request with a token signed by that certificate. wrong
// makes it stamp another imprint; fail makes it answer 500.
type testTSA struct {
	srv     *httptest.Server
	key     *ecdsa.PrivateKey
	cert    *x509.Certificate
	rootPEM []byte
	serial  atomic.Int64
	wrong   atomic.Bool
	fail    atomic.Bool
	stamped atomic.Int64
}

var (
	oidTimeStamping    = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 8}
	oidExtKeyUsage     = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidContentType     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 3}
	oidMessageDigest   = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 4}
	oidSigningTime     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 5}
	oidECDSAWithSHA256 = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}
	oidTestPolicy      = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 99999, 1}
)

func newTestTSA(t *testing.T) *testTSA {
	t.Helper()
	rootKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	root := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test TSA root"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	rootDER, err := x509.CreateCertificate(rand.Reader, root, root, &rootKey.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	rootCert, _ := x509.ParseCertificate(rootDER)
	eku, _ := asn1.Marshal([]asn1.ObjectIdentifier{oidTimeStamping})
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test TSA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(23 * time.Hour),
		KeyUsage:        x509.KeyUsageDigitalSignature,
		ExtraExtensions: []pkix.Extension{{Id: oidExtKeyUsage, Critical: true, Value: eku}},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, rootCert, &key.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(leafDER)
	a := &testTSA{key: key, cert: cert, rootPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rootDER})}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *testTSA) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req timeStampReq
	if _, err := asn1.Unmarshal(body, &req); err != nil || r.Header.Get("Content-Type") != "application/timestamp-query" || a.fail.Load() {
		http.Error(w, "bad request", http.StatusInternalServerError)
		return
	}
	imprint := req.MessageImprint
	if a.wrong.Load() {
		imprint.HashedMessage = make([]byte, 32)
	}
	token, err := a.token(imprint, req.Nonce)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	resp, _ := asn1.Marshal(struct {
		Status pkiStatusInfo
		Token  asn1.RawValue
	}{pkiStatusInfo{Status: 0}, asn1.RawValue{FullBytes: token}})
	a.stamped.Add(1)
	w.Header().Set("Content-Type", "application/timestamp-reply")
	w.Write(resp)
}

type attribute struct {
	Type   asn1.ObjectIdentifier
	Values asn1.RawValue `asn1:"set"`
}

type issuerAndSerial struct {
	Issuer asn1.RawValue
	Serial *big.Int
}

// token is a CMS SignedData holding a TSTInfo over imprint, signed with
// signed attributes (content type, signing time, message digest).
func (a *testTSA) token(imprint messageImprint, nonce *big.Int) ([]byte, error) {
	info, err := asn1.Marshal(struct {
		Version        int
		Policy         asn1.ObjectIdentifier
		MessageImprint messageImprint
		SerialNumber   *big.Int
		GenTime        time.Time `asn1:"generalized"`
		Nonce          *big.Int  `asn1:"optional"`
	}{1, oidTestPolicy, imprint, big.NewInt(a.serial.Add(1)), time.Now().UTC().Truncate(time.Second), nonce})
	if err != nil {
		return nil, err
	}
	digest := sha256.Sum256(info)
	set := func(v any) asn1.RawValue {
		b, _ := asn1.Marshal(v)
		return asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSet, IsCompound: true, Bytes: b}
	}
	attrs := []attribute{
		{oidContentType, set(oidTSTInfo)},
		{oidSigningTime, set(time.Now().UTC().Truncate(time.Second))},
		{oidMessageDigest, set(digest[:])},
	}
	// Signed attributes are signed as a DER SET OF and sent as [0].
	attrSet, err := asn1.MarshalWithParams(attrs, "set")
	if err != nil {
		return nil, err
	}
	h := sha256.Sum256(attrSet)
	sig, err := a.key.Sign(rand.Reader, h[:], crypto.SHA256)
	if err != nil {
		return nil, err
	}
	implicit0 := bytes.Clone(attrSet)
	implicit0[0] = 0xa0
	sha := algorithmIdentifier{Algorithm: oidSHA256}
	signerInfo := struct {
		Version            int
		SID                issuerAndSerial
		DigestAlgorithm    algorithmIdentifier
		SignedAttrs        asn1.RawValue
		SignatureAlgorithm algorithmIdentifier
		Signature          []byte
	}{1, issuerAndSerial{asn1.RawValue{FullBytes: a.cert.RawIssuer}, a.cert.SerialNumber}, sha,
		asn1.RawValue{FullBytes: implicit0}, algorithmIdentifier{Algorithm: oidECDSAWithSHA256}, sig}
	si, err := asn1.Marshal(signerInfo)
	if err != nil {
		return nil, err
	}
	digestAlgs, _ := asn1.MarshalWithParams([]algorithmIdentifier{sha}, "set")
	certs := asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: a.cert.Raw}
	sd, err := asn1.Marshal(struct {
		Version          int
		DigestAlgorithms asn1.RawValue
		EncapContentInfo encapContentInfo
		Certificates     asn1.RawValue
		SignerInfos      asn1.RawValue
	}{3, asn1.RawValue{FullBytes: digestAlgs}, encapContentInfo{oidTSTInfo, info}, certs,
		asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSet, IsCompound: true, Bytes: si}})
	if err != nil {
		return nil, err
	}
	return asn1.Marshal(contentInfo{ContentType: oidSignedData, Content: asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: sd}})
}

// issuerRoot returns the PEM of the test signer's root certificate.
func issuerRoot(t *testing.T, s *Signer) []byte {
	t.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.chain[len(s.chain)-1]})
}

// With a timestamp authority configured, every signature carries its
// token (sigTst2), which the reference implementation validates against
// the signature and, given the authority's root, trusts; the manifest's
// size is the same whatever the token's.
func TestTimestampedSignaturesValidate(t *testing.T) {
	tsa := newTestTSA(t)
	s := testSigner(t).WithTimestamps(NewTSA(tsa.srv.URL, tsa.srv.Client()))
	anchors := append(issuerRoot(t, s), tsa.rootPEM...)
	for _, tc := range []struct {
		name, mime string
		format     Format
		b          []byte
	}{
		{"png", "image/png", PNG, encodeImage(t, PNG)},
		{"wav", "audio/wav", WAV, testWAV()},
		{"mp4", "video/mp4", MP4, c2patest.MP4(c2patest.MP4Options{Brand: "isom"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tsa.stamped.Load()
			signed := signBytes(t, s, tc.b, tc.format, Provenance{Org: "org_1"})
			if got := tsa.stamped.Load() - before; got != 1 {
				t.Errorf("%d timestamps asked for one signature", got)
			}
			r := c2patest.ValidateTrusting(t, tc.mime, signed, anchors)
			if r.ActiveManifest == "" || len(r.Failures()) > 0 {
				t.Fatalf("validation failures %+v\n%s", r.Failures(), r.Raw)
			}
			for _, code := range []string{"timeStamp.validated", "timeStamp.trusted", "signingCredential.trusted", "claimSignature.validated"} {
				if !strings.Contains(r.Raw, `"`+code+`"`) {
					t.Errorf("no %s\n%s", code, r.Raw)
				}
			}
		})
	}
	// Without the authority's root the token is reported untrusted, and
	// without a timestamp authority there is no token.
	signed := signBytes(t, s, encodeImage(t, PNG), PNG, Provenance{Org: "org_1"})
	if r := c2patest.ValidateTrusting(t, "image/png", signed, issuerRoot(t, s)); !strings.Contains(r.Raw, `"timeStamp.untrusted"`) {
		t.Errorf("a token from an untrusted authority was not reported untrusted\n%s", r.Raw)
	}
	plain := signBytes(t, testSigner(t), encodeImage(t, PNG), PNG, Provenance{Org: "org_1"})
	if bytes.Contains(plain, []byte("sigTst2")) || !bytes.Contains(signed, []byte("sigTst2")) {
		t.Error("sigTst2 is not exactly where a timestamp authority is configured")
	}
}

// An authority that fails, or stamps another message, fails the signing
// (the download is then an error, not an unstamped file).
func TestTimestampFailures(t *testing.T) {
	tsa := newTestTSA(t)
	s := testSigner(t).WithTimestamps(NewTSA(tsa.srv.URL, tsa.srv.Client()))
	png := encodeImage(t, PNG)
	tsa.fail.Store(true)
	if _, err := s.Sign(context.Background(), bytes.NewReader(png), int64(len(png)), PNG, Provenance{}); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("a failing authority: %v", err)
	}
	tsa.fail.Store(false)
	tsa.wrong.Store(true)
	if _, err := s.Sign(context.Background(), bytes.NewReader(png), int64(len(png)), PNG, Provenance{}); err == nil || !strings.Contains(err.Error(), "another message") {
		t.Errorf("a token over another message: %v", err)
	}
}

// A token larger than the room kept for it makes the signer keep more and
// sign again.
func TestTimestampRoomGrows(t *testing.T) {
	tsa := newTestTSA(t)
	s := testSigner(t).WithTimestamps(NewTSA(tsa.srv.URL, tsa.srv.Client()))
	s.tokenRoom.Store(100)
	signed := signBytes(t, s, encodeImage(t, PNG), PNG, Provenance{Org: "org_1"})
	if s.tokenRoom.Load() <= 100 {
		t.Fatalf("room %d did not grow", s.tokenRoom.Load())
	}
	if r := c2patest.ValidateTrusting(t, "image/png", signed, append(issuerRoot(t, s), tsa.rootPEM...)); len(r.Failures()) > 0 || !strings.Contains(r.Raw, `"timeStamp.validated"`) {
		t.Fatalf("validation failures %+v\n%s", r.Failures(), r.Raw)
	}
}

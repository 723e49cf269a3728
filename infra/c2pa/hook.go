package c2pa

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os/exec"
	"time"

	"github.com/veraison/go-cose"
)

// A signing hook signs the claim's digest outside threadbox (a KMS, an
// HSM, a signing service), so the private key need not live in the
// threadbox process. It is handed the SHA-256 digest of the COSE
// structure to sign (32 bytes) and returns the ECDSA P-256 signature
// over it, as DER (ECDSA-Sig-Value) or as the 64 bytes r||s. The
// signature is checked against the chain's signing certificate before it
// is used.

// SignHook signs a SHA-256 digest with the issuer's key.
type SignHook interface {
	SignDigest(ctx context.Context, digest []byte) ([]byte, error)
}

// HTTPHook signs by POSTing the digest (application/octet-stream) to an
// endpoint, which answers 200 with the signature.
type HTTPHook struct{ endpoint }

// NewHTTPHook returns a hook calling url; a nil client is one with a
// 10-second timeout.
func NewHTTPHook(url string, client *http.Client) *HTTPHook {
	return &HTTPHook{newEndpoint(url, client)}
}

// maxHookSignature bounds what a hook may answer.
const maxHookSignature = 1 << 10

// SignDigest implements SignHook.
func (h *HTTPHook) SignDigest(ctx context.Context, digest []byte) ([]byte, error) {
	return h.post(ctx, "signing hook", "application/octet-stream", digest, maxHookSignature, "X-Signature-Algorithm", "ES256")
}

// CommandHook signs by running a program (no shell) with the digest on
// its standard input; it writes the signature to its standard output.
type CommandHook struct {
	argv    []string
	timeout time.Duration
}

// NewCommandHook returns a hook running argv, stopped after timeout (10
// seconds when 0).
func NewCommandHook(argv []string, timeout time.Duration) (*CommandHook, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("c2pa: the signing command is empty")
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &CommandHook{argv: argv, timeout: timeout}, nil
}

// SignDigest implements SignHook.
func (c *CommandHook) SignDigest(ctx context.Context, digest []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.argv[0], c.argv[1:]...)
	cmd.Stdin = bytes.NewReader(digest)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limitedWriter{w: &out, n: maxHookSignature + 1}, &limitedWriter{w: &stderr, n: 512}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("c2pa: signing command: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out.Bytes(), nil
}

// limitedWriter keeps the first n bytes written and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if keep := min(len(p), l.n); keep > 0 {
		l.w.Write(p[:keep])
		l.n -= keep
	}
	return len(p), nil
}

// NewHookSigner returns a signer whose claim signatures come from hook,
// for the certificate chain (the signing certificate first, an ECDSA
// P-256 key) that names version as the claim generator.
func NewHookSigner(hook SignHook, chain []*x509.Certificate, version string) (*Signer, error) {
	if hook == nil {
		return nil, errors.New("c2pa: no signing hook")
	}
	if len(chain) == 0 {
		return nil, errors.New("c2pa: the certificate chain is empty")
	}
	pub, ok := chain[0].PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve.Params().Name != "P-256" {
		return nil, errors.New("c2pa: the signing certificate's key must be ECDSA P-256 (ES256)")
	}
	s, err := newSigner(chain, version)
	if err != nil {
		return nil, err
	}
	s.hook, s.hookKey = hook, pub
	return s, nil
}

// hookSigner is the go-cose signer of one signing through a hook.
type hookSigner struct {
	ctx  context.Context
	hook SignHook
	pub  *ecdsa.PublicKey
}

func (h *hookSigner) Algorithm() cose.Algorithm { return cose.AlgorithmES256 }

// Sign returns the COSE signature (r||s, 32 bytes each) of content's
// SHA-256 digest, as the hook signed it and after checking it.
func (h *hookSigner) Sign(_ io.Reader, content []byte) ([]byte, error) {
	digest := sha256.Sum256(content)
	sig, err := h.hook.SignDigest(h.ctx, digest[:])
	if err != nil {
		return nil, err
	}
	var r, s *big.Int
	if len(sig) == 64 {
		r, s = new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
	} else {
		var v struct{ R, S *big.Int }
		if rest, err := asn1.Unmarshal(sig, &v); err != nil || len(rest) > 0 {
			return nil, errors.New("c2pa: the signing hook's answer is neither DER nor r||s")
		}
		r, s = v.R, v.S
	}
	if r.Sign() <= 0 || s.Sign() <= 0 || !ecdsa.Verify(h.pub, digest[:], r, s) {
		return nil, errors.New("c2pa: the signing hook's signature does not verify with the signing certificate")
	}
	out := make([]byte, 64)
	r.FillBytes(out[:32])
	s.FillBytes(out[32:])
	return out, nil
}

package egressproxy

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The lifetimes of the install's CA and of the certificates it issues for
// hosts whose TLS the proxy terminates.
const (
	CALifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 7 * 24 * time.Hour
	// leafRenew is how long before its end a host's certificate is
	// issued again.
	leafRenew = 24 * time.Hour
)

// Names of the files of the trust folder, the folder every sandbox sees
// read-only (boxes.TrustPath).
const (
	TrustCAFile     = "threadbox-ca.pem"
	TrustBundleFile = "ca-bundle.pem"
)

// CA is the install's certificate authority: the proxy terminates TLS with
// a certificate it issues for a host an org bound a secret to, and the
// sandboxes trust it through the trust folder.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	leafKey *ecdsa.PrivateKey
	now     func() time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// LoadOrCreateCA reads the CA (its certificate and its key, PEM) kept at
// path, or makes one there with mode 0600 when the file does not exist.
// Two processes starting at once on a shared folder agree on one.
func LoadOrCreateCA(path string) (*CA, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return createCA(path)
	}
	if err != nil {
		return nil, fmt.Errorf("egressproxy: read CA: %w", err)
	}
	var certDER, keyDER []byte
	for blk, rest := pem.Decode(b); blk != nil; blk, rest = pem.Decode(rest) {
		switch blk.Type {
		case "CERTIFICATE":
			certDER = blk.Bytes
		case "PRIVATE KEY":
			keyDER = blk.Bytes
		}
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("egressproxy: %s: certificate: %w", path, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("egressproxy: %s: key: %w", path, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("egressproxy: %s: the key cannot sign", path)
	}
	return newCA(cert, signer)
}

func createCA(path string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egressproxy: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "threadbox egress CA", Organization: []string{"threadbox"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egressproxy: CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("egressproxy: CA key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("egressproxy: CA folder: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return LoadOrCreateCA(path)
	}
	if err != nil {
		return nil, fmt.Errorf("egressproxy: write CA: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	_ = pem.Encode(&buf, &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if _, err := f.Write(buf.Bytes()); err != nil {
		return nil, fmt.Errorf("egressproxy: write CA: %w", err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("egressproxy: write CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egressproxy: CA certificate: %w", err)
	}
	return newCA(cert, key)
}

func newCA(cert *x509.Certificate, key crypto.Signer) (*CA, error) {
	if !cert.IsCA {
		return nil, errors.New("egressproxy: the CA certificate is not a CA's")
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egressproxy: leaf key: %w", err)
	}
	return &CA{cert: cert, key: key, leafKey: leafKey, now: time.Now, leaves: map[string]*tls.Certificate{},
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// CertPEM returns the CA's certificate, PEM.
func (ca *CA) CertPEM() []byte { return bytes.Clone(ca.certPEM) }

// Certificate returns the CA's certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// leaf returns a certificate for host issued by the CA, kept until a day
// before it ends.
func (ca *CA) leaf(host string) (*tls.Certificate, error) {
	now := ca.now()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c := ca.leaves[host]; c != nil && now.Add(leafRenew).Before(c.Leaf.NotAfter) {
		return c, nil
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &ca.leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("egressproxy: certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egressproxy: certificate for %s: %w", host, err)
	}
	if len(ca.leaves) >= 4096 {
		clear(ca.leaves)
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: ca.leafKey, Leaf: leaf}
	ca.leaves[host] = c
	return c, nil
}

// systemBundles are where Linux distributions keep the system's roots, as
// crypto/x509 looks for them.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// WriteTrust writes the trust folder every sandbox sees read-only: the
// CA's certificate alone (TrustCAFile) and a bundle of the host's system
// roots followed by the CA (TrustBundleFile), which the tools inside are
// pointed at. Each file is replaced whole, so a sandbox never reads half.
func WriteTrust(dir string, ca *CA) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("egressproxy: trust folder: %w", err)
	}
	var roots []byte
	for _, p := range systemBundles {
		if b, err := os.ReadFile(p); err == nil {
			roots = b
			break
		}
	}
	if len(roots) > 0 && roots[len(roots)-1] != '\n' {
		roots = append(roots, '\n')
	}
	for name, content := range map[string][]byte{TrustCAFile: ca.certPEM, TrustBundleFile: append(roots, ca.certPEM...)} {
		tmp, err := os.CreateTemp(dir, "."+name+".*")
		if err != nil {
			return fmt.Errorf("egressproxy: trust folder: %w", err)
		}
		_, werr := tmp.Write(content)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o644), os.Rename(tmp.Name(), filepath.Join(dir, name))); err != nil {
			_ = os.Remove(tmp.Name())
			return fmt.Errorf("egressproxy: trust folder: %w", err)
		}
	}
	return nil
}

package c2pa

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// Files of the issuer generated when the operator configures none, in the
// folder given to SelfSignedIssuer.
const (
	generatedKeyFile   = "c2pa-key.pem"
	generatedChainFile = "c2pa-chain.pem"
)

// oidDocumentSigning is the extended key usage id-kp-documentSigning
// (RFC 9336), one of those C2PA accepts for a claim signer.
var oidDocumentSigning = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 36}

// LoadIssuer reads an ECDSA P-256 private key (PKCS #8 or SEC 1 PEM) and
// a PEM certificate chain, the signing certificate first.
func LoadIssuer(chainFile, keyFile string) (*ecdsa.PrivateKey, []*x509.Certificate, error) {
	chainPEM, err := os.ReadFile(chainFile)
	if err != nil {
		return nil, nil, fmt.Errorf("c2pa: certificate chain: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("c2pa: key: %w", err)
	}
	return parseIssuer(chainPEM, keyPEM)
}

// LoadChain reads a PEM certificate chain, the signing certificate first
// (for a signing hook, which keeps the key).
func LoadChain(chainFile string) ([]*x509.Certificate, error) {
	chainPEM, err := os.ReadFile(chainFile)
	if err != nil {
		return nil, fmt.Errorf("c2pa: certificate chain: %w", err)
	}
	return parseChain(chainPEM)
}

func parseIssuer(chainPEM, keyPEM []byte) (*ecdsa.PrivateKey, []*x509.Certificate, error) {
	chain, err := parseChain(chainPEM)
	if err != nil {
		return nil, nil, err
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, nil, err
	}
	return key, chain, nil
}

// parseChain reads the certificates of a PEM chain.
func parseChain(chainPEM []byte) ([]*x509.Certificate, error) {
	var chain []*x509.Certificate
	for rest := chainPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("c2pa: certificate chain: %w", err)
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		return nil, errors.New("c2pa: the certificate chain file holds no certificate")
	}
	return chain, nil
}

// parseKey reads an ECDSA private key, PKCS #8 or SEC 1, from PEM.
func parseKey(keyPEM []byte) (*ecdsa.PrivateKey, error) {
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, errors.New("c2pa: the key file holds no PEM key")
	}
	if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, errors.New("c2pa: the key is not an ECDSA key")
		}
		return ek, nil
	} else if ek, err2 := x509.ParseECPrivateKey(b.Bytes); err2 == nil {
		return ek, nil
	} else {
		return nil, fmt.Errorf("c2pa: key: %w", err)
	}
}

// SelfSignedIssuer returns the issuer kept in dir, generating it on first
// use (created is then true): a self-signed root and a signing
// certificate it issued, valid for ten years. Validators report its
// signatures as untrusted, since no trust list holds the root; the
// operator's own chain (LoadIssuer) is for production.
func SelfSignedIssuer(dir, name string) (key *ecdsa.PrivateKey, chain []*x509.Certificate, created bool, err error) {
	keyPath, chainPath := filepath.Join(dir, generatedKeyFile), filepath.Join(dir, generatedChainFile)
	if _, err := os.Stat(keyPath); err == nil {
		key, chain, err := LoadIssuer(chainPath, keyPath)
		return key, chain, false, err
	}
	keyPEM, chainPEM, err := generateIssuer(name, time.Now())
	if err != nil {
		return nil, nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, false, fmt.Errorf("c2pa: %w", err)
	}
	if err := os.WriteFile(chainPath, chainPEM, 0o644); err != nil {
		return nil, nil, false, fmt.Errorf("c2pa: %w", err)
	}
	// The key is written last: its presence says the issuer is whole.
	tmp := keyPath + ".tmp"
	if err := os.WriteFile(tmp, keyPEM, 0o600); err != nil {
		return nil, nil, false, fmt.Errorf("c2pa: %w", err)
	}
	if err := os.Rename(tmp, keyPath); err != nil {
		return nil, nil, false, fmt.Errorf("c2pa: %w", err)
	}
	key, chain, err = parseIssuer(chainPEM, keyPEM)
	return key, chain, true, err
}

// generateIssuer makes a root CA and a claim-signing certificate under it
// (C2PA refuses a self-signed signing certificate), as PEM.
func generateIssuer(name string, now time.Time) (keyPEM, chainPEM []byte, err error) {
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("c2pa: %w", err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("c2pa: %w", err)
	}
	serial := func() *big.Int {
		n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
		return n.Add(n, big.NewInt(1))
	}
	root := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name + " Content Credentials root", Organization: []string{name}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	rootDER, err := x509.CreateCertificate(rand.Reader, root, root, &rootKey.PublicKey, rootKey)
	if err != nil {
		return nil, nil, fmt.Errorf("c2pa: %w", err)
	}
	rootCert, err := x509.ParseCertificate(rootDER)
	if err != nil {
		return nil, nil, fmt.Errorf("c2pa: %w", err)
	}
	leaf := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name + " Content Credentials signer", Organization: []string{name}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0).Add(-time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageEmailProtection},
		UnknownExtKeyUsage:    []asn1.ObjectIdentifier{oidDocumentSigning},
		BasicConstraintsValid: true,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, rootCert, &leafKey.PublicKey, rootKey)
	if err != nil {
		return nil, nil, fmt.Errorf("c2pa: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		return nil, nil, fmt.Errorf("c2pa: %w", err)
	}
	var chain bytes.Buffer
	_ = pem.Encode(&chain, &pem.Block{Type: "CERTIFICATE", Bytes: leafDER})
	_ = pem.Encode(&chain, &pem.Block{Type: "CERTIFICATE", Bytes: rootDER})
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), chain.Bytes(), nil
}

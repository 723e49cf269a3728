package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	"threadbox/app/credentials"
	"threadbox/infra/c2pa"
)

// contentCredentials builds the download signer (docs/content-credentials.md)
// from the settings:
//   - C2PA_CERT_CHAIN and C2PA_KEY: the operator's issuer, a PEM
//     certificate chain (signing certificate first) and its ECDSA P-256
//     key; both or neither. With neither, an issuer is generated on first
//     start in DATA_DIR/c2pa and a warning says validators report it
//     untrusted.
//   - C2PA_SIGN_URL or C2PA_SIGN_COMMAND, instead of C2PA_KEY (with
//     C2PA_CERT_CHAIN): a signing hook that holds the key (an HTTP
//     endpoint the digest is POSTed to, or a program, split on spaces and
//     run without a shell, reading the digest on its standard input).
//   - C2PA_TSA_URL: an RFC 3161 timestamp authority asked to timestamp
//     every signature; none when empty.
//   - C2PA_FORMATS: the formats signed, comma-separated (png, jpeg, gif,
//     wav, svg, webp, mp3, tiff, flac, mp4, mov, m4a, heic, avif), "all"
//     (the default) or "none".
func contentCredentials(getenv func(string) string, dataDir string, policies credentials.Policies, log *slog.Logger) (*credentials.Service, error) {
	formats, err := parseFormats(getenv("C2PA_FORMATS"))
	if err != nil {
		return nil, &configError{"C2PA_FORMATS", err.Error()}
	}
	if len(formats) == 0 {
		return credentials.New(nil, policies, log), nil
	}
	signer, err := c2paSigner(getenv, dataDir, log)
	if err != nil {
		return nil, err
	}
	if tsa := strings.TrimSpace(getenv("C2PA_TSA_URL")); tsa != "" {
		if u, err := url.Parse(tsa); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, &configError{"C2PA_TSA_URL", "an http or https URL of an RFC 3161 timestamp authority"}
		}
		signer.WithTimestamps(c2pa.NewTSA(tsa, nil))
	}
	return credentials.New(&mediaSigner{s: signer, formats: formats}, policies, log), nil
}

// c2paSigner returns the signer of the configured issuer: a key file, a
// signing hook, or the generated issuer.
func c2paSigner(getenv func(string) string, dataDir string, log *slog.Logger) (*c2pa.Signer, error) {
	chainFile, keyFile := strings.TrimSpace(getenv("C2PA_CERT_CHAIN")), strings.TrimSpace(getenv("C2PA_KEY"))
	hookURL, hookCmd := strings.TrimSpace(getenv("C2PA_SIGN_URL")), strings.TrimSpace(getenv("C2PA_SIGN_COMMAND"))
	hooks := 0
	for _, v := range []string{keyFile, hookURL, hookCmd} {
		if v != "" {
			hooks++
		}
	}
	switch {
	case hooks > 1:
		return nil, &configError{"C2PA_KEY", "set one of C2PA_KEY, C2PA_SIGN_URL and C2PA_SIGN_COMMAND"}
	case hooks == 1 && chainFile == "":
		return nil, &configError{"C2PA_CERT_CHAIN", "C2PA_KEY, C2PA_SIGN_URL or C2PA_SIGN_COMMAND needs C2PA_CERT_CHAIN"}
	case hooks == 0 && chainFile != "":
		return nil, &configError{"C2PA_CERT_CHAIN", "C2PA_CERT_CHAIN needs C2PA_KEY, C2PA_SIGN_URL or C2PA_SIGN_COMMAND"}
	case keyFile != "":
		key, chain, err := c2pa.LoadIssuer(chainFile, keyFile)
		if err != nil {
			return nil, &configError{"C2PA_CERT_CHAIN", err.Error()}
		}
		signer, err := c2pa.NewSigner(key, chain, version())
		if err != nil {
			return nil, &configError{"C2PA_CERT_CHAIN", err.Error()}
		}
		return signer, nil
	case hooks == 1:
		chain, err := c2pa.LoadChain(chainFile)
		if err != nil {
			return nil, &configError{"C2PA_CERT_CHAIN", err.Error()}
		}
		var hook c2pa.SignHook
		if hookURL != "" {
			if u, err := url.Parse(hookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, &configError{"C2PA_SIGN_URL", "an http or https URL of a signing endpoint"}
			}
			hook = c2pa.NewHTTPHook(hookURL, nil)
		} else if hook, err = c2pa.NewCommandHook(strings.Fields(hookCmd), 0); err != nil {
			return nil, &configError{"C2PA_SIGN_COMMAND", err.Error()}
		}
		signer, err := c2pa.NewHookSigner(hook, chain, version())
		if err != nil {
			return nil, &configError{"C2PA_CERT_CHAIN", err.Error()}
		}
		return signer, nil
	}
	dir := filepath.Join(dataDir, "c2pa")
	key, chain, created, err := c2pa.SelfSignedIssuer(dir, "threadbox")
	if err != nil {
		return nil, fmt.Errorf("content credentials: %w", err)
	}
	signer, err := c2pa.NewSigner(key, chain, version())
	if err != nil {
		return nil, fmt.Errorf("content credentials: %w", err)
	}
	if created {
		log.Warn("content credentials: no issuer configured (C2PA_CERT_CHAIN, C2PA_KEY); generated a self-signed one, which validators report as untrusted", "dir", dir)
	}
	return signer, nil
}

// parseFormats reads C2PA_FORMATS.
func parseFormats(v string) ([]c2pa.Format, error) {
	v = strings.TrimSpace(strings.ToLower(v))
	switch v {
	case "", "all":
		return c2pa.Formats, nil
	case "none":
		return nil, nil
	}
	var out []c2pa.Format
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		if f == "jpg" {
			f = "jpeg"
		}
		if !slices.Contains(c2pa.Formats, c2pa.Format(f)) {
			return nil, fmt.Errorf("unknown format %q: the formats signed are %s (or all, none)", f, formatNames())
		}
		out = append(out, c2pa.Format(f))
	}
	return out, nil
}

func formatNames() string {
	names := make([]string, len(c2pa.Formats))
	for i, f := range c2pa.Formats {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// version is threadbox's version for the claim generator: the module's
// version when built from a tagged module, otherwise the VCS revision.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "dev+" + s.Value[:12]
		}
	}
	return "dev"
}

// mediaSigner adapts the C2PA signer to the download service's port, for
// the formats the operator enabled.
type mediaSigner struct {
	s       *c2pa.Signer
	formats []c2pa.Format
}

func (m *mediaSigner) Signs(mime string) bool {
	f, ok := c2pa.FormatOf(mime)
	return ok && slices.Contains(m.formats, f)
}

func (m *mediaSigner) Sign(ctx context.Context, r io.ReaderAt, size int64, mime string, p credentials.Provenance) (credentials.Signed, error) {
	f, ok := c2pa.FormatOf(mime)
	if !ok {
		return credentials.Signed{}, fmt.Errorf("%w: %s is not signed", credentials.ErrUnsignable, mime)
	}
	a, err := m.s.Sign(ctx, r, size, f, c2pa.Provenance{Org: p.Org, Thread: p.Thread, Container: p.Container, ToolUseID: p.ToolUseID, Path: p.Path})
	if errors.Is(err, c2pa.ErrMalformed) {
		return credentials.Signed{}, fmt.Errorf("%w: %w", credentials.ErrUnsignable, err)
	}
	if err != nil {
		return credentials.Signed{}, err
	}
	return credentials.Signed{Size: a.Size, At: a.ReaderAt, Tag: a.Tag}, nil
}

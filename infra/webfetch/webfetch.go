// Package webfetch fetches what requests name by URL (images and documents
// in messages) on the server's behalf, so that no model server fetches a
// user's URL itself: only public addresses are dialled (checked on the
// address actually dialled, so neither a redirect nor a DNS answer can lead
// inside), bodies are size-capped and their type checked.
package webfetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"threadbox/domain/egress"
	"threadbox/domain/fault"
)

// Defaults of Config.
const (
	DefaultMaxBytes     = 10 << 20
	DefaultTimeout      = 15 * time.Second
	DefaultMaxRedirects = 3
)

// Config tunes a Fetcher.
type Config struct {
	// MaxBytes caps one body; 0 means DefaultMaxBytes.
	MaxBytes int64
	// Timeout bounds one fetch, redirects included; 0 means DefaultTimeout.
	Timeout time.Duration
	// Allow lists internal addresses that may be fetched all the same (an
	// operator's own image store); public addresses are always allowed.
	Allow []netip.Prefix
}

// Fetcher fetches URLs from public addresses.
type Fetcher struct {
	cfg    Config
	client *http.Client
}

// New returns a Fetcher.
func New(cfg Config) *Fetcher {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	f := &Fetcher{cfg: cfg}
	d := &net.Dialer{Timeout: 10 * time.Second, Control: f.control}
	f.client = &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil, // a proxy would dial for us, unchecked
			DialContext:           d.DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 10 * time.Second,
			MaxIdleConns:          4,
			IdleConnTimeout:       30 * time.Second,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > DefaultMaxRedirects {
				return fault.Errorf(fault.Invalid, "more than %d redirects", DefaultMaxRedirects)
			}
			return checkScheme(req.URL)
		},
	}
	return f
}

// ParseAllow parses a comma-separated list of addresses and CIDR prefixes.
func ParseAllow(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, "/") {
			a, err := netip.ParseAddr(item)
			if err != nil {
				return nil, fmt.Errorf("webfetch: %q is not an address or prefix: %w", item, err)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			return nil, fmt.Errorf("webfetch: %q is not an address or prefix: %w", item, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// errInternal marks a refused address, so that the dial error can be told
// from a network failure.
var errInternal = errors.New("internal address")

// control refuses, just before connecting, an address that is not public
// and not allowed.
func (f *Fetcher) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webfetch: %w: %s", errInternal, address)
	}
	a := ap.Addr().Unmap()
	for _, p := range f.cfg.Allow {
		if p.Contains(a) {
			return nil
		}
	}
	if !egress.Public(a) {
		return fmt.Errorf("webfetch: %w: %s", errInternal, a)
	}
	return nil
}

func checkScheme(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fault.Errorf(fault.Invalid, "only http and https URLs are fetched, not %q", u.Scheme)
	}
	if u.User != nil {
		return fault.New(fault.Invalid, "URLs with credentials are not fetched")
	}
	return nil
}

// Fetch gets rawURL and returns its media type and body. accept lists the
// media types taken; a body of another type, larger than MaxBytes, from an
// internal address (directly or after a redirect) or answered with an
// error status is refused with a fault.Invalid error saying why.
func (f *Fetcher) Fetch(ctx context.Context, rawURL string, accept []string) (string, []byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", nil, fault.New(fault.Invalid, "not a URL")
	}
	if err := checkScheme(u); err != nil {
		return "", nil, err
	}
	if u.Host == "" {
		return "", nil, fault.New(fault.Invalid, "the URL names no host")
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", nil, fault.Wrap(fault.Invalid, "not a URL that can be fetched", err)
	}
	req.Header.Set("Accept", strings.Join(accept, ", "))
	req.Header.Set("User-Agent", "threadbox")
	resp, err := f.client.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, errInternal):
			return "", nil, fault.Wrap(fault.Invalid, "the URL leads to a private, loopback or otherwise internal address, which is not fetched", err)
		case fault.KindOf(err) == fault.Invalid:
			return "", nil, err
		}
		return "", nil, fault.Wrap(fault.Invalid, "could not fetch the URL", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", nil, fault.Errorf(fault.Invalid, "fetching the URL answered HTTP %d", resp.StatusCode)
	}
	if resp.ContentLength > f.cfg.MaxBytes {
		return "", nil, fault.Errorf(fault.Invalid, "the URL's content is larger than %d bytes", f.cfg.MaxBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.cfg.MaxBytes+1))
	if err != nil {
		return "", nil, fault.Wrap(fault.Invalid, "could not read the URL's content", err)
	}
	if int64(len(body)) > f.cfg.MaxBytes {
		return "", nil, fault.Errorf(fault.Invalid, "the URL's content is larger than %d bytes", f.cfg.MaxBytes)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if !slices.Contains(accept, mt) {
		// A server that does not say (or says octet-stream) gets its
		// content sniffed.
		if sniffed, _, _ := mime.ParseMediaType(http.DetectContentType(body)); slices.Contains(accept, sniffed) && (mt == "" || mt == "application/octet-stream") {
			mt = sniffed
		} else {
			return "", nil, fault.Errorf(fault.Invalid, "the URL's content is %q, not one of %s", mt, strings.Join(accept, ", "))
		}
	}
	return mt, body, nil
}

// Package c2patest runs the reference C2PA implementation (c2pa-rs built
// to WebAssembly, pinned in infra/c2pa/testdata/c2pa and installed by
// scripts/test.sh) over a file, for tests of signed downloads.
package c2patest

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Report is what the reference implementation says about a file.
type Report struct {
	Error          string `json:"error"`
	ActiveManifest string `json:"active_manifest"`
	Manifests      map[string]struct {
		ClaimGeneratorInfo []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"claim_generator_info"`
		Assertions []struct {
			Label string          `json:"label"`
			Data  json.RawMessage `json:"data"`
		} `json:"assertions"`
		SignatureInfo struct {
			Issuer string `json:"issuer"`
			Alg    string `json:"alg"`
		} `json:"signature_info"`
	} `json:"manifests"`
	ValidationStatus  []Status `json:"validation_status"`
	ValidationResults struct {
		ActiveManifest struct {
			Success []Status `json:"success"`
			Failure []Status `json:"failure"`
		} `json:"activeManifest"`
	} `json:"validation_results"`
	ValidationState string `json:"validation_state"`
	// Raw is the validator's whole output.
	Raw string `json:"-"`
}

// Status is one validation status code.
type Status struct {
	Code        string `json:"code"`
	Explanation string `json:"explanation"`
}

// Failures are the failure statuses that say the file or its manifest is
// not intact: every failure but signingCredential.untrusted, which a
// generated issuer (on no trust list) always gets.
func (r Report) Failures() []Status {
	var out []Status
	for _, s := range append(r.ValidationStatus, r.ValidationResults.ActiveManifest.Failure...) {
		if s.Code != "signingCredential.untrusted" {
			out = append(out, s)
		}
	}
	return out
}

// Has reports whether code is among the statuses (successes or
// failures).
func (r Report) Has(code string) bool {
	for _, s := range append(append(r.ValidationStatus, r.ValidationResults.ActiveManifest.Failure...), r.ValidationResults.ActiveManifest.Success...) {
		if s.Code == code {
			return true
		}
	}
	return false
}

// Assertion returns the active manifest's assertion labelled label, or
// nil.
func (r Report) Assertion(label string) json.RawMessage {
	for _, a := range r.Manifests[r.ActiveManifest].Assertions {
		if a.Label == label {
			return a.Data
		}
	}
	return nil
}

// Validate runs the reference implementation over b, read as MIME type
// mime. Without the validator installed the test is skipped, or fails
// under CI=true.
func Validate(t testing.TB, mime string, b []byte) Report {
	t.Helper()
	return ValidateTrusting(t, mime, b, nil)
}

// ValidateTrusting is Validate with the PEM certificates of anchors as the
// reader's trust anchors (none when nil).
func ValidateTrusting(t testing.TB, mime string, b, anchors []byte) Report {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(self), "..", "testdata", "c2pa")
	_, nodeErr := exec.LookPath("node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@contentauth", "c2pa-wasm")); err != nil || nodeErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the C2PA validator is not installed (node, npm ci --prefix %s)", dir)
		}
		t.Skipf("the C2PA validator is not installed (node, npm ci --prefix %s)", dir)
	}
	req := request{Format: mime, File: filepath.Join(t.TempDir(), "asset")}
	if err := os.WriteFile(req.File, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if anchors != nil {
		req.Anchors = filepath.Join(t.TempDir(), "anchors.pem")
		if err := os.WriteFile(req.Anchors, anchors, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := shared.validate(filepath.Join(dir, "validate.mjs"), req)
	if err != nil {
		t.Fatalf("validator: %v", err)
	}
	var r Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("validator output %q: %v", out, err)
	}
	r.Raw = string(out)
	return r
}

// request is one file for the validator to read.
type request struct {
	Format  string `json:"format"`
	File    string `json:"file"`
	Anchors string `json:"anchors,omitempty"`
}

// validator is one validate.mjs serving a whole test binary: starting
// Node and compiling the WebAssembly module took about 0.6 s a file, and
// a run reads hundreds. It ends when the test binary does (its input
// closes with the binary).
type validator struct {
	mu  sync.Mutex
	in  io.WriteCloser
	out *bufio.Reader
	cmd *exec.Cmd
}

// shared is the test binary's validator, started by its first use.
var shared validator

// validate asks the validator (started from script when none runs) to
// read req's file, and returns its answer.
func (v *validator) validate(script string, req request) ([]byte, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cmd == nil {
		cmd := exec.Command("node", script)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		v.cmd, v.in, v.out = cmd, in, bufio.NewReader(out)
	}
	line, err := json.Marshal(req)
	if err == nil {
		_, err = v.in.Write(append(line, '\n'))
	}
	var answer []byte
	if err == nil {
		answer, err = v.out.ReadBytes('\n')
	}
	if err != nil {
		// A validator that died is started again for the next file.
		v.in.Close()
		_ = v.cmd.Wait()
		v.cmd = nil
		return nil, err
	}
	return answer, nil
}

// Package e2e drives a headless Chromium for end-to-end tests of the web
// frontend: it starts a fresh browser per test, runs chromedp actions with
// timeouts, takes screenshots, and keeps a screenshot and the page's
// console when a test fails.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"threadbox/infra/sandbox/sandboxtest"
)

// DefaultChromium is the browser the tests drive unless THREADBOX_CHROMIUM
// names another.
const DefaultChromium = "/usr/bin/chromium"

// DefaultTimeout bounds each step of a test.
const DefaultTimeout = 60 * time.Second

// NeedChromium returns the Chromium executable, failing the test under
// CI=true and skipping it otherwise when it is missing.
func NeedChromium(t testing.TB) string {
	t.Helper()
	path := os.Getenv("THREADBOX_CHROMIUM")
	if path == "" {
		path = DefaultChromium
	}
	if _, err := os.Stat(path); err != nil {
		msg := fmt.Sprintf("chromium missing (apt-get install chromium chromium-driver): %v", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// Browser is one headless Chromium with one tab, for one test.
type Browser struct {
	t         testing.TB
	ctx       context.Context
	downloads string
	profile   string
	scratch   string

	mu          sync.Mutex
	console     []string
	downloadLog []string // what the browser said of each download, in order
}

// Start launches Chromium with a fresh profile and a tab of width×height
// CSS pixels. When the test fails, a screenshot of the tab is saved under
// test-artifacts/ at the repository's root and its path logged, with the
// page's console messages.
func Start(t testing.TB, width, height int) *Browser {
	t.Helper()
	exe := NeedChromium(t)
	profile := t.TempDir()
	// Chromium makes its single-instance socket's folder (and other scratch
	// files) in TMPDIR and leaves it behind when it is killed, as every
	// browser is at the end of a test: a folder of the test's own keeps
	// them from piling up in the machine's /tmp. Not t.TempDir: its path
	// holds the test's name, and a socket's path must fit in 108 bytes.
	scratch, err := os.MkdirTemp("", "chromium")
	if err != nil {
		t.Fatalf("e2e: scratch folder: %v", err)
	}
	// Registered before the browser's cleanup, so it runs after it. Both
	// run when a run of sandboxtest.Main reaches its timeout, too.
	sandboxtest.Cleanup(t, func() { _ = os.RemoveAll(scratch) })
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(width, height),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Env("TMPDIR=" + scratch),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &Browser{t: t, ctx: ctx, downloads: t.TempDir(), profile: profile, scratch: scratch}
	sandboxtest.Cleanup(t, func() {
		cancelTab()
		cancelAlloc()
	})
	// The first action starts the browser and opens the tab; it must get
	// the tab's own context, since ending that context ends the browser.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), int64(height))); err != nil {
		t.Fatalf("e2e: start chromium: %v", err)
	}
	start, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	eventsOn := true
	_, err = chromedp.CallBrowser(start, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: b.downloads, EventsEnabled: &eventsOn,
	})
	if err != nil {
		t.Fatalf("e2e: download folder: %v", err)
	}
	if err := chromedp.ListenBrowser(ctx, b.noteDownload); err != nil {
		t.Fatalf("e2e: download events: %v", err)
	}
	go b.collectConsole()
	// A failure screenshot of an earlier run must not pass for this one's.
	if dir, err := ArtifactsDir(); err == nil {
		_ = os.Remove(filepath.Join(dir, safeName(t.Name()+"-failure")+".png"))
	}
	// Registered after the browser's cleanup, so it runs first, while the
	// tab is still there.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if path, err := b.Screenshot("failure"); err != nil {
			t.Logf("e2e: no failure screenshot: %v", err)
		} else {
			t.Logf("e2e: screenshot of the failure: %s", path)
		}
		if c := b.Console(); len(c) > 0 {
			t.Logf("e2e: browser console:\n%s", strings.Join(c, "\n"))
		}
		if said := b.pageSays(); said != "" {
			t.Logf("e2e: the page's notice and status lines: %s", said)
		}
	})
	return b
}

// noteDownload records the start and the end of each download. It runs on
// the loop that reads the browser's messages, so it only appends.
func (b *Browser) noteDownload(ev any) {
	var line string
	switch ev := ev.(type) {
	case *browser.EventDownloadWillBegin:
		line = fmt.Sprintf("%s began: %s from %s", ev.GUID, ev.SuggestedFilename, ev.URL)
	case *browser.EventDownloadProgress:
		if ev.State == browser.DownloadProgressStateInProgress {
			return
		}
		line = fmt.Sprintf("%s %s after %.0f of %.0f bytes", ev.GUID, ev.State, ev.ReceivedBytes, ev.TotalBytes)
	default:
		return
	}
	b.mu.Lock()
	b.downloadLog = append(b.downloadLog, line)
	b.mu.Unlock()
}

// pageSays returns the text of the page's notice and of its non-empty
// status lines (a download button's error shows in one), for the log of a
// failed test.
func (b *Browser) pageSays() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	said, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('.notice, [role=status]')].map((e) => e.textContent.trim()).filter(Boolean).join(' | ')`))
	if err != nil {
		return ""
	}
	return said
}

func (b *Browser) collectConsole() {
	for m, err := range chromedp.Console(b.ctx) {
		if err != nil {
			return
		}
		b.mu.Lock()
		b.console = append(b.console, fmt.Sprintf("[%s] %s", m.Type, m.Text))
		b.mu.Unlock()
	}
}

// Console returns the page's console messages and uncaught exceptions so far.
func (b *Browser) Console() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.console...)
}

// Context returns the tab's context, for chromedp calls the helpers lack.
func (b *Browser) Context() context.Context { return b.ctx }

// Downloads returns the folder the browser saves downloads into.
func (b *Browser) Downloads() string { return b.downloads }

// Do runs steps in order within DefaultTimeout, failing the test at the
// first error with what was being done.
func (b *Browser) Do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, DefaultTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("e2e: %s: %v", what, err)
	}
}

// Run runs one action that returns a value, within DefaultTimeout,
// failing the test on error.
func Run[T any](b *Browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, DefaultTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("e2e: %s: %v", what, err)
	}
	return v
}

// Eval evaluates a JavaScript expression and returns its value.
func Eval[T any](b *Browser, what, expr string) T {
	b.t.Helper()
	return Run(b, what, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// WaitTrue polls a JavaScript expression until it is true, failing the test
// with what when timeout passes first.
func (b *Browser) WaitTrue(what, expr string, timeout time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool]("!!("+expr+")",
		chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond)))
	if err != nil {
		b.t.Fatalf("e2e: waiting for %s: %v", what, err)
	}
}

// WaitText waits until the text of the first element matching the CSS
// selector contains want, and returns that text.
func (b *Browser) WaitText(selector, want string, timeout time.Duration) string {
	b.t.Helper()
	expr := fmt.Sprintf(`(() => { const el = document.querySelector(%q); return !!el && el.textContent.includes(%q); })()`, selector, want)
	b.WaitTrue(fmt.Sprintf("%s to contain %q", selector, want), expr, timeout)
	return Eval[string](b, "read "+selector, fmt.Sprintf(`document.querySelector(%q).textContent`, selector))
}

// ThrottleUploads caps the tab's upload speed at bytesPerSecond, so that
// progress can be watched on a fast machine; zero or less lifts the cap.
func (b *Browser) ThrottleUploads(bytesPerSecond float64) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, DefaultTimeout)
	defer cancel()
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		b.t.Fatalf("e2e: throttle uploads: %v", err)
	}
	conds := []*network.Conditions{}
	if bytesPerSecond > 0 {
		conds = append(conds, &network.Conditions{UploadThroughput: bytesPerSecond, DownloadThroughput: -1})
	}
	_, err := chromedp.Call(ctx, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{MatchedNetworkConditions: conds})
	if err != nil {
		b.t.Fatalf("e2e: throttle uploads: %v", err)
	}
}

// SetViewport resizes the tab to width×height CSS pixels.
func (b *Browser) SetViewport(width, height int) {
	b.t.Helper()
	b.Do(fmt.Sprintf("viewport %dx%d", width, height), chromedp.EmulateViewport(int64(width), int64(height)))
}

// Screenshot saves a PNG of the whole page under test-artifacts/ as
// <test name>-<name>.png and returns its path.
func (b *Browser) Screenshot(name string) (string, error) {
	dir, err := ArtifactsDir()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return "", fmt.Errorf("e2e: screenshot: %w", err)
	}
	path := filepath.Join(dir, safeName(b.t.Name()+"-"+name)+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return "", fmt.Errorf("e2e: screenshot: %w", err)
	}
	return path, nil
}

// WaitDownload waits until the browser has finished saving a download
// named name and returns its bytes.
func (b *Browser) WaitDownload(name string, timeout time.Duration) []byte {
	b.t.Helper()
	path := filepath.Join(b.downloads, name)
	deadline := time.Now().Add(timeout)
	for {
		if data, err := os.ReadFile(path); err == nil {
			if _, err := os.Stat(path + ".crdownload"); errors.Is(err, os.ErrNotExist) {
				return data
			}
		}
		if time.Now().After(deadline) {
			entries, _ := os.ReadDir(b.downloads)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			b.mu.Lock()
			events := strings.Join(b.downloadLog, "; ")
			b.mu.Unlock()
			if events == "" {
				events = "no download began"
			}
			b.t.Fatalf("e2e: download %s did not arrive within %s (folder holds %v; the browser: %s)", name, timeout, names, events)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func safeName(s string) string { return unsafeChars.ReplaceAllString(s, "_") }

// ArtifactsDir returns test-artifacts/ at the repository's root (the
// folder holding go.mod), creating it.
func ArtifactsDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("e2e: artifacts dir: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("e2e: artifacts dir: no go.mod above the working directory")
		}
		dir = parent
	}
	out := filepath.Join(dir, "test-artifacts")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", fmt.Errorf("e2e: artifacts dir: %w", err)
	}
	return out, nil
}

package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// TestBrowserKeepsItsScratchFilesToTheTest checks that Chromium's
// single-instance socket, which a killed browser never removes, is made in
// a folder of the test's own rather than in the machine's /tmp, and that a
// long test name does not make the socket's path too long for Chromium.
func TestBrowserKeepsItsScratchFilesToTheTest(t *testing.T) {
	for _, name := range []string{"short", strings.Repeat("a test name as long as many of the suite's ", 3)} {
		t.Run(name, func(t *testing.T) {
			b := Start(t, 400, 300)
			target, err := os.Readlink(filepath.Join(b.profile, "SingletonSocket"))
			if err != nil {
				t.Fatalf("the profile has no single-instance socket link: %v", err)
			}
			if !strings.HasPrefix(target, b.scratch+string(filepath.Separator)) {
				t.Fatalf("the single-instance socket is at %s, outside the test's scratch folder %s", target, b.scratch)
			}
		})
	}
}

// TestBrowserRecordsDownloads checks that the browser's own account of
// each download (begun, completed or cut) is kept, so that a download that
// never arrives fails with what the browser saw rather than an empty folder.
func TestBrowserRecordsDownloads(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			fmt.Fprint(w, `<a id=good href="/good" download="good.txt">good</a> <a id=cut href="/cut" download="cut.txt">cut</a>`)
		case "/good":
			fmt.Fprint(w, "every byte")
		case "/cut":
			// Promise more than is sent, then drop the connection.
			w.Header().Set("Content-Length", "1000")
			fmt.Fprint(w, "a few bytes")
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}
	}))
	defer srv.Close()
	b := Start(t, 400, 300)
	b.Do("open the page", chromedp.Navigate(srv.URL), chromedp.Click(chromedp.ID("good")))
	if got := string(b.WaitDownload("good.txt", 20*time.Second)); got != "every byte" {
		t.Fatalf("downloaded %q", got)
	}
	b.Do("the cut download", chromedp.Click(chromedp.ID("cut")))
	deadline := time.Now().Add(20 * time.Second)
	for {
		b.mu.Lock()
		log := strings.Join(b.downloadLog, "\n")
		b.mu.Unlock()
		if strings.Contains(log, "began: cut.txt") && strings.Contains(log, string(browser.DownloadProgressStateCanceled)) {
			if !strings.Contains(log, "began: good.txt from "+srv.URL+"/good") || !strings.Contains(log, "completed after 10 of 10 bytes") {
				t.Fatalf("the browser's account lacks the good download:\n%s", log)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cut download was not recorded as cut:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

package web

import (
	"io"
	"io/fs"
	"log/slog"
	"net/http/httptest"
	"path"
	"regexp"
	"strings"
	"testing"
)

func TestUIRoutes(t *testing.T) {
	app := New(Services{}, slog.New(slog.DiscardHandler), Options{}).App()
	tests := []struct {
		path    string
		status  int
		ctype   string
		contain string
	}{
		{"/", 200, "text/html; charset=utf-8", `<script type="module" src="/ui/app.js">`},
		{"/ui/app.js", 200, "text/javascript; charset=utf-8", "function boot()"},
		{"/ui/chat.js", 200, "text/javascript; charset=utf-8", "export async function renderThread"},
		{"/ui/styles.css", 200, "text/css; charset=utf-8", ":focus-visible"},
		{"/ui/favicon.svg", 200, "image/svg+xml", "<svg"},
		{"/ui/missing.js", 404, "application/json", `"not_found_error"`},
		{"/ui/index.txt", 404, "application/json", `"not_found_error"`},
		{"/ui/../ui.go", 404, "application/json", `"not_found_error"`},
		{"/ui/%2e%2e/ui.go", 404, "application/json", `"not_found_error"`},
		{"/ui/", 404, "application/json", `"not_found_error"`},
		// The frontend shadows none of the API.
		{"/healthz", 200, "application/json", `"ok"`},
		{"/api/v1/app/me", 401, "application/json", `"authentication_error"`},
		{"/api/v1/app/ui/app.js", 401, "application/json", `"authentication_error"`},
		{"/api/gpt/v1/files", 401, "application/json", `"authentication_error"`},
		{"/nothing-here", 404, "application/json", `"not_found_error"`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			resp, err := app.Test(httptest.NewRequest("GET", tt.path, nil))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), tt.ctype) || !strings.Contains(string(body), tt.contain) {
				t.Fatalf("GET %s: %d %q %.200s; want %d %q containing %q", tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), body, tt.status, tt.ctype, tt.contain)
			}
			if tt.status != 200 || strings.HasPrefix(tt.path, "/api/") || tt.path == "/healthz" {
				return
			}
			for h, want := range map[string]string{
				"Content-Security-Policy": uiCSP,
				"X-Content-Type-Options":  "nosniff",
				"Cache-Control":           "no-cache",
				"X-Frame-Options":         "DENY",
			} {
				if got := resp.Header.Get(h); got != want {
					t.Errorf("%s: %q, want %q", h, got, want)
				}
			}
		})
	}
}

// TestUICSP: the policy allows nothing but the page's own origin (and the
// blob: images it makes from authenticated fetches).
func TestUICSP(t *testing.T) {
	for _, d := range strings.Split(uiCSP, ";") {
		f := strings.Fields(d)
		if len(f) < 2 {
			t.Fatalf("directive %q has no source", d)
		}
		for _, src := range f[1:] {
			switch src {
			case "'self'", "'none'":
			case "blob:":
				if f[0] != "img-src" {
					t.Errorf("blob: allowed in %s", f[0])
				}
			default:
				t.Errorf("%s allows %s", f[0], src)
			}
		}
	}
}

func TestUIRevalidation(t *testing.T) {
	app := New(Services{}, slog.New(slog.DiscardHandler), Options{}).App()
	resp, err := app.Test(httptest.NewRequest("GET", "/ui/app.js", nil))
	if err != nil {
		t.Fatal(err)
	}
	etag := resp.Header.Get("ETag")
	if len(etag) < 10 || etag[0] != '"' {
		t.Fatalf("ETag %q", etag)
	}
	tests := []struct {
		name, ifNoneMatch string
		status            int
	}{
		{"same", etag, 304},
		{"weak", "W/" + etag, 304},
		{"in a list", `"other", ` + etag, 304},
		{"star", "*", 304},
		{"other", `"other"`, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/ui/app.js", nil)
			req.Header.Set("If-None-Match", tt.ifNoneMatch)
			resp, err := app.Test(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || (tt.status == 304 && len(body) != 0) {
				t.Fatalf("%d with %d bytes, want %d", resp.StatusCode, len(body), tt.status)
			}
		})
	}
	other, _ := app.Test(httptest.NewRequest("GET", "/ui/chat.js", nil))
	if other.Header.Get("ETag") == etag {
		t.Error("two assets share an ETag")
	}
}

// TestUIAssetsSelfContained: every module import and every asset the page
// names is embedded, and nothing is loaded from another origin.
func TestUIAssetsSelfContained(t *testing.T) {
	imports := regexp.MustCompile(`(?m)(?:^import .* from|import\() ?'\./([^']+)'`)
	refs := regexp.MustCompile(`(?:src|href)="/ui/([^"]+)"`)
	external := regexp.MustCompile(`(?i)(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}/`)
	cssLoads := regexp.MustCompile(`@import|url\(`)
	err := fs.WalkDir(uiFiles, "ui", func(file string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(uiFiles, file)
		if err != nil {
			return err
		}
		src := string(b)
		var names []string
		for _, m := range imports.FindAllStringSubmatch(src, -1) {
			names = append(names, m[1])
		}
		for _, m := range refs.FindAllStringSubmatch(src, -1) {
			names = append(names, m[1])
		}
		for _, n := range names {
			if _, err := fs.Stat(uiFiles, "ui/"+n); err != nil {
				t.Errorf("%s names %s, which is not embedded", file, n)
			}
			if _, ok := uiType(path.Ext(n)); !ok {
				t.Errorf("%s names %s, whose type is not served", file, n)
			}
		}
		if strings.HasSuffix(file, ".svg") {
			src = strings.ReplaceAll(src, `xmlns="http://www.w3.org/2000/svg"`, "")
		}
		// Vendored modules (pinned and checked by scripts/ui-vendor.sh)
		// name their projects' sites in comments and use innerHTML on
		// inert documents (DOMPurify's parsing); the rules below are for
		// the frontend's own code.
		vendored := strings.HasPrefix(file, "ui/vendor/")
		if m := external.FindString(src); m != "" && !vendored {
			t.Errorf("%s refers to another origin: %q", file, m)
		}
		if m := cssLoads.FindString(src); m != "" && strings.HasSuffix(file, ".css") {
			t.Errorf("%s loads a resource: %q", file, m)
		}
		if strings.Contains(src, ".innerHTML") && !vendored {
			t.Errorf("%s sets innerHTML: build elements with h() so text from the server is never parsed as markup", file)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

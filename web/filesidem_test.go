package web

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/files"
	"threadbox/domain/file"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

// memFiles keeps what uploads write, by container and sandbox path
// (files.Store: only Write is used here).
type memFiles struct {
	files.Store
	mu sync.Mutex
	m  map[string]string
}

func (f *memFiles) Write(_ context.Context, cid, sandboxPath string, r io.Reader, _ int64) (file.Info, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return file.Info{}, err
	}
	loc, err := file.DefaultTable().Resolve(sandboxPath)
	if err != nil {
		return file.Info{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[cid+":"+sandboxPath] = string(b)
	now := time.Now()
	return file.Info{Rel: loc.Rel, Size: int64(len(b)), Created: now, Modified: now}, nil
}

func (f *memFiles) get(key string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.m[key]
	return v, ok
}

// scopes resolves scope ids as app/containers does: none is the caller's
// default container, or a sandbox token's own.
type scopes struct{}

func (scopes) Container(_ context.Context, p user.Principal, scopeID string, _ bool) (string, error) {
	return scopes{}.StorageID(context.Background(), p, scopeID)
}

func (scopes) StorageID(_ context.Context, p user.Principal, scopeID string) (string, error) {
	switch {
	case scopeID == "" && p.Kind == user.SandboxToken:
		return p.ContainerID, nil
	case scopeID == "":
		scopeID = "default"
	}
	return p.UserID + "/" + scopeID, nil
}

type defaultPolicy struct{}

func (defaultPolicy) OrgPolicy(context.Context, string) (org.Policy, error) {
	return org.DefaultPolicy(), nil
}

// TestSandboxUploadsKeepTheirOwnIdempotencyKeys uploads a file with an
// Idempotency-Key as the user (into the default container) and then with
// the same key from inside a sandbox (into the sandbox's container, which
// an upload without scope_id names there). The key names a different
// upload there: the sandbox's file is stored in its own container, and it
// is not answered with the user's upload in another container.
func TestSandboxUploadsKeepTheirOwnIdempotencyKeys(t *testing.T) {
	st := &memFiles{m: map[string]string{}}
	srv := &Server{log: slog.New(slog.DiscardHandler), opt: Options{BodyLimit: 1 << 20},
		svc: Services{Files: files.New(files.Deps{Store: st, Containers: scopes{}, Policies: defaultPolicy{}})}}
	api := user.Principal{UserID: "usr_1", OrgID: "org_1", Role: user.Member, TokenID: "tok_1", Kind: user.APIToken}
	sandbox := api
	sandbox.TokenID, sandbox.Kind, sandbox.ContainerID = "tok_2", user.SandboxToken, "thr_1"

	upload := func(p user.Principal, content string) (int, []byte) {
		t.Helper()
		app := fiber.New(fiber.Config{ErrorHandler: srv.errorHandler})
		app.Post("/api/gpt/v1/files", func(c *fiber.Ctx) error { c.Locals(principalKey, p); return c.Next() }, srv.uploadFile)
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, err := mw.CreateFormFile("file", "report.txt")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fw.Write([]byte(content))
		if err := mw.Close(); err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("POST", "/api/gpt/v1/files", &body)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		req.Header.Set("Idempotency-Key", "report-v1")
		resp, err := app.Test(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if status, body := upload(api, "the user's report"); status != fiber.StatusOK {
		t.Fatalf("the user's upload: %d %s", status, body)
	}
	status, body := upload(sandbox, "the sandbox's report")
	if status != fiber.StatusOK {
		t.Fatalf("the sandbox's upload: %d %s", status, body)
	}
	const uploaded = "/mnt/user-data/uploads/report.txt"
	if got, ok := st.get("thr_1:" + uploaded); !ok || got != "the sandbox's report" {
		t.Errorf("the sandbox's container holds %q (%v), want the sandbox's upload", got, ok)
	}
	if got, _ := st.get("usr_1/default:" + uploaded); got != "the user's report" {
		t.Errorf("the default container holds %q, want the user's upload", got)
	}
	var f struct {
		SizeBytes int64 `json:"size_bytes"`
	}
	if err := json.Unmarshal(body, &f); err != nil || f.SizeBytes != int64(len("the sandbox's report")) {
		t.Errorf("the sandbox was answered %s, not its own upload", body)
	}
}

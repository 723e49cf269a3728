package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	msgwire "threadbox/app/messages/wire"
	"threadbox/e2e"
	"threadbox/infra/llm/fakeupstream"
)

// TestE2EModelTitle: with a model upstream, a thread made with the default
// title is titled by the model after its first exchange, in one small
// request the strict upstream accepts (no tools, a system prompt, the
// exchange as one user message); when that request fails the title is
// the first line as plain text. Both show in the page and the sidebar, at
// 1440 px in the light theme and at 375 px in the dark one.
func TestE2EModelTitle(t *testing.T) {
	e2e.NeedChromium(t)
	fake := fakeupstream.New()
	t.Cleanup(fake.Close)
	s := e2eServer(t, map[string]string{"MODEL_PROVIDER": "anthropic", "MODEL_BASE_URL": fake.URL(), "MODEL_NAME": "fake-model"})
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	pid := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Titles"}).json(t)["id"]
	text := func(s string) []msgwire.ContentBlock {
		return []msgwire.ContentBlock{{Type: msgwire.BlockText, Text: s}}
	}
	for _, tc := range []struct {
		name          string
		width, height int
		scheme        string
		title         fakeupstream.Reply
		want          string
	}{
		{"written by the model", 1440, 1000, "light", fakeupstream.Reply{Content: text("\"Quarterly sales by region.\"")}, "Quarterly sales by region"},
		{"first line when the model fails", 375, 800, "dark", fakeupstream.Reply{Status: 400, ErrorMessage: "refused for the test"}, "Sales check"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": pid})
			if th.status != 201 || th.json(t)["title"] != "New thread" {
				t.Fatalf("thread: %d %s", th.status, th.body)
			}
			tid := th.json(t)["id"].(string)
			before := len(fake.Requests())
			fake.Push(fakeupstream.Reply{Content: text("North sold 40 and South 21.")}, tc.title)
			b := e2e.Start(t, 1440, 1000)
			emulateScheme(t, b, tc.scheme)
			uiLogin(b, s.base, e2eEmail, e2ePassword)
			b.SetViewport(tc.width, tc.height)
			b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
			b.Do("send", chromedp.SetValue(chromedp.ID("message"), "## Sales check\n\nWhich region sold more?"), chromedp.Click(chromedp.ID("send")))
			b.WaitTrue("the answer", `document.querySelectorAll('.msg').length === 2 && !document.querySelector('[aria-busy]')`, 30*time.Second)
			b.WaitText("#thread-title", tc.want, 10*time.Second)
			b.WaitText(fmt.Sprintf(`.threads a[data-thread-id=%q]`, tid), tc.want, 10*time.Second)
			if got := s.do("GET", appAPI+"/thread/"+tid, token, nil).json(t)["title"]; got != tc.want {
				t.Errorf("the stored title: %v, want %q", got, tc.want)
			}
			if got := fake.Refused(); len(got) > 0 {
				t.Fatalf("the upstream refused: %q", got)
			}
			var asked []fakeupstream.Request
			for _, r := range fake.Requests()[before:] {
				if r.Path == "" {
					asked = append(asked, r)
				}
			}
			if len(asked) != 2 {
				t.Fatalf("%d model requests, want the answer's and the title's", len(asked))
			}
			var title struct {
				MaxTokens int               `json:"max_tokens"`
				System    string            `json:"system"`
				Tools     []json.RawMessage `json:"tools"`
				Messages  []struct {
					Role    string `json:"role"`
					Content []struct {
						Text string `json:"text"`
					} `json:"content"`
				} `json:"messages"`
			}
			if err := json.Unmarshal(asked[1].Body, &title); err != nil {
				t.Fatal(err)
			}
			if title.MaxTokens != 32 || title.System == "" || len(title.Tools) != 0 || len(title.Messages) != 1 || title.Messages[0].Role != "user" ||
				len(title.Messages[0].Content) != 1 || title.Messages[0].Content[0].Text != "User: ## Sales check\n\nWhich region sold more?\n\nAssistant: North sold 40 and South 21." {
				t.Errorf("the title request: %s", asked[1].Body)
			}
		})
	}
}

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"threadbox/e2e"
)

// TestE2EAdminEgress: an admin switches egress on and sets the allowlist
// on the admin page; a chat turn's command then asks the proxy for a host
// not on it, and the page's ledger shows that connection refused, with its
// rule, among the refused ones.
func TestE2EAdminEgress(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": needDocker(t)})
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open the admin page", chromedp.Click(chromedp.ID("nav-admin")), chromedp.WaitVisible(chromedp.ID("f-egress")))

	b.Do("switch egress on", chromedp.Click(chromedp.ID("f-egress")))
	b.WaitText(".admin .saved", "on", 10*time.Second)
	b.Do("set the allowlist",
		chromedp.SetValue(chromedp.ID("f-egress-allow"), "allowed.test\n*.example.test:443"),
		chromedp.Click(chromedp.CSS(".egress-allow button[type=submit]")))
	b.WaitText(".admin .saved", "egress allowlist (2 patterns)", 10*time.Second)
	r := s.do("GET", appAPI+"/org/features", token, nil)
	if body := string(r.body); r.status != 200 || !strings.Contains(body, `"allowed.test"`) || !strings.Contains(body, `"*.example.test:443"`) {
		t.Fatalf("the features after the page saved them: %d %s", r.status, body)
	}

	p := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Egress"})
	th := s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": p.json(t)["id"], "title": "Reach out"})
	tid := th.json(t)["id"].(string)
	r = s.do("POST", appAPI+"/thread/"+tid+"/messages", token, map[string]any{
		"content": "```bash\ncurl -sS -m 10 http://blocked.test/ || true\n```",
		"pgpt":    map[string]any{"tools": []any{"code_execution"}},
	})
	if r.status != 200 {
		t.Fatalf("turn: %d %s", r.status, r.body)
	}

	// The ledger is written in batches: wait until the API has the row.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(string(s.do("GET", appAPI+"/org/egress", token, nil).body), "blocked.test"); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the refused connection never reached the ledger; the turn answered %s", r.body)
		}
	}
	b.Do("show the refused connections", chromedp.SetValue(chromedp.ID("egress-filter"), "false"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('egress-filter').dispatchEvent(new Event('change'))`))
	b.WaitTrue("the refusal in the ledger", `[...document.querySelectorAll('#egress-ledger tbody tr')].some(r => r.textContent.includes('blocked.test:80') && r.textContent.includes('refused') && r.textContent.includes('`+tid+`'))`, 20*time.Second)
	b.Do("show the allowed connections", chromedp.SetValue(chromedp.ID("egress-filter"), "true"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('egress-filter').dispatchEvent(new Event('change'))`))
	b.WaitTrue("no refusal among the allowed", `[...document.querySelectorAll('#egress-ledger tbody tr')].every(r => !r.textContent.includes('blocked.test'))`, 10*time.Second)
	everyControlLabelled(t, b, "admin page with egress")
}

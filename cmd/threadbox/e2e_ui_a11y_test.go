package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"threadbox/e2e"
)

// TestE2EAccessibility runs axe-core (pinned, vendored in e2e/vendor) on
// the sign-in page, a thread with its answer (its message has a table, a
// task list and a highlighted code block with comments), the thread's
// files with a CSV and a text preview open, and the admin page, at 1440
// and 375 px in the light and dark themes: no serious or critical
// violation of the WCAG 2.1 A and AA rules and axe's best practices (the
// skip link to the message box is TestE2EConversationLayout's). The
// conversation is a polite live region, so streamed text is read out.
func TestE2EAccessibility(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, token := apiThread(t, s, "Access", "Checked")
	if r := s.do("POST", appAPI+"/thread/"+tid+"/messages", token, map[string]any{"content": "## Totals\n\n| region | total |\n|---|---|\n| North | 40 |\n\n- [x] load\n- [ ] plot\n\n```python\n# the total of the regions\ntotal = 40 + 21  # North and South, the two regions of the sales report of the first quarter\n```"}); r.status != 200 {
		t.Fatalf("turn: %d %s", r.status, r.body)
	}
	for name, body := range map[string]string{"sales.csv": salesCSV, "notes.txt": "hello from the notes\n"} {
		if r := s.do("PUT", appAPI+"/thread/"+tid+"/put-file/"+name, token, []byte(body), "Content-Type", "application/octet-stream"); r.status != 200 {
			t.Fatalf("put %s: %d %s", name, r.status, r.body)
		}
	}
	type look struct {
		width, height int
		scheme        string
	}
	looks := []look{{1440, 1000, "light"}, {1440, 1000, "dark"}, {375, 812, "light"}, {375, 812, "dark"}}
	b := e2e.Start(t, 1440, 1000)
	check := func(page string, l look) {
		t.Helper()
		for _, v := range b.Axe(fmt.Sprintf("%s at %d px, %s", page, l.width, l.scheme)) {
			t.Errorf("%s at %d px, %s theme: %s", page, l.width, l.scheme, v)
		}
	}
	set := func(l look) { emulateScheme(t, b, l.scheme); b.SetViewport(l.width, l.height) }

	b.Do("open the sign-in page", chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.ID("email")))
	for _, l := range looks {
		set(l)
		check("sign-in", l)
	}
	set(looks[0])
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	item := func(name string) string { return `.file-list li[data-path="/mnt/user-data/uploads/` + name + `"]` }
	for _, l := range looks {
		set(l)
		b.Do("open the thread", chromedp.Navigate(s.base+"/#/"), chromedp.WaitVisible(chromedp.CSS(".home")),
			chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
		b.WaitTrue("the answer", `document.querySelectorAll('.messages > .msg').length === 2 && !document.querySelector('[aria-busy=true]')`, 15*time.Second)
		check("thread", l)
		// The conversation is a polite live region: streamed text is read.
		if got := e2e.Eval[string](b, "the live region", `(() => { const log = document.querySelector('[role=log]'); return log.getAttribute('aria-live') || 'polite'; })()`); got != "polite" {
			t.Errorf("the conversation's aria-live is %q", got)
		}

		b.WaitTrue("two files", `document.querySelectorAll('.file-list li[data-path]').length === 2`, 10*time.Second)
		for _, name := range []string{"sales.csv", "notes.txt"} {
			b.Do("preview "+name, chromedp.Evaluate[chromedp.Void](`document.querySelector('`+item(name)+` button.preview-toggle').click()`))
		}
		b.WaitText(item("sales.csv")+" .file-preview table td", "Jan", 10*time.Second)
		b.WaitText(item("notes.txt")+" .file-preview pre", "hello from the notes", 10*time.Second)
		check("files", l)

		b.Do("open the admin page", chromedp.Navigate(s.base+"/#/admin"), chromedp.WaitVisible(chromedp.ID("f-code")))
		b.WaitTrue("the audit log", `document.querySelectorAll('#audit tbody tr').length > 0`, 10*time.Second)
		check("admin", l)
	}
}

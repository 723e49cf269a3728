package main

// Browser tests of the page as a user meets it at its limits: a window
// 280 px wide, and names and text that are long, or that look like markup.

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"threadbox/e2e"
)

// TestE2ENarrowSidebar: at 280 px a long project name is cut with an
// ellipsis on one line, its full text in a title, and the project's Rename
// and Delete buttons stay on that line beside it.
func TestE2ENarrowSidebar(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	names := []string{
		"Quarterly revenue forecasting for the northern and southern regions",
		"Supercalifragilisticexpialidocious_without_any_spaces_at_all",
	}
	for _, n := range names {
		if r := s.do("POST", appAPI+"/project", token, map[string]any{"name": n}); r.status != 201 {
			t.Fatalf("project %q: %d %s", n, r.status, r.body)
		}
	}
	b := e2e.Start(t, 1440, 900)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.SetViewport(280, 700)
	b.WaitTrue("the folded sidebar", `document.getElementById('menu').offsetParent !== null`, 5*time.Second)
	b.Do("open the sidebar", chromedp.Click(chromedp.ID("menu")), chromedp.WaitVisible(chromedp.CSS(`.project .project-name`)))
	b.WaitTrue("both projects", `document.querySelectorAll('.project').length === 2`, 10*time.Second)
	// Each row: the name's box is one line tall, and the buttons sit
	// beside it (to its right, their middles within its height).
	got := e2e.Eval[[]string](b, "the projects' rows", `[...document.querySelectorAll('.project')].map((p) => {
		const name = p.querySelector('.project-name');
		const n = name.getBoundingClientRect();
		const bad = [];
		const text = document.createRange();
		text.selectNodeContents(name.lastChild); // the name, after its caret
		const lines = new Set([...text.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.bottom))).size;
		if (lines !== 1) bad.push('name on ' + lines + ' lines');
		const cut = [name, ...name.querySelectorAll('*')].find((e) => e.scrollWidth > e.clientWidth && getComputedStyle(e).textOverflow === 'ellipsis');
		if (!cut) bad.push('name not cut with an ellipsis');
		if (name.title !== name.textContent.slice(1)) bad.push('title ' + JSON.stringify(name.title));
		for (const btn of p.querySelectorAll('.project-actions button')) {
			const r = btn.getBoundingClientRect();
			const mid = (r.top + r.bottom) / 2;
			if (mid < n.top || mid > n.bottom) bad.push(btn.textContent + ' not on the name\'s line');
			if (r.left < n.right - 1) bad.push(btn.textContent + ' overlaps the name');
			if (r.right > document.documentElement.clientWidth) bad.push(btn.textContent + ' past the window');
		}
		return bad.join(', ');
	})`)
	for i, bad := range got {
		if bad != "" {
			t.Errorf("project row %d at 280 px: %s", i, bad)
		}
	}
	noHorizontalOverflow(t, b, 280)
	shoot(t, b, "sidebar-280")
}

// TestE2EErrorsAsSentences: the server words its errors as Go does ("thread
// not found"); the page shows each as a sentence, in its notice and
// wherever else it reports one, without renaming what the message names.
func TestE2EErrorsAsSentences(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	pid := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Errors"}).json(t)["id"]
	tid := s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": pid, "title": "Gone soon"}).json(t)["id"].(string)
	b := e2e.Start(t, 1440, 900)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))

	// Another client deletes the thread; renaming it here is refused.
	if r := s.do("DELETE", appAPI+"/thread/"+tid, token, nil); r.status != 204 && r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	r := s.do("PATCH", appAPI+"/thread/"+tid, token, map[string]any{"title": "Renamed"})
	said, _ := r.json(t)["error"].(map[string]any)["message"].(string)
	if r.status != 404 || said == "" || said[0] < 'a' || said[0] > 'z' {
		t.Fatalf("the server's refusal is not a lower-case message: %d %s", r.status, r.body)
	}
	want := strings.ToUpper(said[:1]) + strings.TrimSuffix(said[1:], ".") + "."
	b.Do("rename the deleted thread",
		chromedp.Click(chromedp.CSS(".thread-head button.rename")),
		chromedp.WaitVisible(chromedp.ID("dialog-input")),
		chromedp.SetValue(chromedp.ID("dialog-input"), "Renamed"),
		chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitTrue("the notice", `!document.getElementById('notice').hidden`, 10*time.Second)
	if got := e2e.Eval[string](b, "notice", `document.getElementById('notice-text').textContent`); got != want {
		t.Errorf("the notice says %q, want %q", got, want)
	}

	// The rule itself, on messages of other shapes: names keep their case,
	// a message that ends a sentence gets no second full stop.
	got := e2e.Eval[[]string](b, "sentences", `import('/ui/api.js').then((m) => [
		'internal server error (error id err_1)',
		'pgpt.tools must be a list',
		'x-api-key header missing',
		'Refused: already a sentence.',
		'is this a question?',
		'feature "uploads" is disabled',
		'',
	].map(m.sentence))`)
	wantAll := []string{
		"Internal server error (error id err_1).",
		"pgpt.tools must be a list.",
		"x-api-key header missing.",
		"Refused: already a sentence.",
		"Is this a question?",
		`Feature "uploads" is disabled.`,
		"",
	}
	if strings.Join(got, "\n") != strings.Join(wantAll, "\n") {
		t.Errorf("sentences:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantAll, "\n"))
	}
	// A request that got no answer: fetch's own words mean nothing to a user.
	if got := e2e.Eval[string](b, "no answer", `import('/ui/api.js').then((m) => m.explain(new TypeError('Failed to fetch')))`); got != "The server could not be reached. Check the connection and try again." {
		t.Errorf("a request without an answer: %q", got)
	}
}

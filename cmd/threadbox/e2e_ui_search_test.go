package main

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"threadbox/e2e"
)

// TestThreadSearchAPI: GET /thread?q= finds the caller's threads by title
// and by the text of their messages, ignoring case, each saying where it
// matched; JSON field names and LIKE wildcards match nothing; another
// user's threads are never found; q takes neither before nor project_id.
// On both databases.
func TestThreadSearchAPI(t *testing.T) {
	databases(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, nil)
		token := s.bootstrap("acme", "admin@acme.test")
		if r := s.do("POST", appAPI+"/org/users", token, map[string]any{"email": "bob@acme.test", "password": "bob-password-1"}); r.status != 201 {
			t.Fatalf("add bob: %d %s", r.status, r.body)
		}
		bob := apiLogin(t, s, "bob@acme.test", "bob-password-1")
		pid := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Research"}).json(t)["id"]
		threads := map[string]string{}
		for _, tc := range []struct{ who, title, msg string }{
			{token, "Budget 2027", "hello"},
			{token, "Travel plans", "Book the flight to Lisbon on Friday, \"window\" seat"},
			{token, "Misc", "I am 100% sure"},
			{bob, "Bob's trip", "Lisbon too"},
		} {
			id := s.do("POST", appAPI+"/thread", tc.who, map[string]any{"project_id": pid, "title": tc.title}).json(t)["id"].(string)
			threads[tc.title] = id
			if r := s.do("POST", appAPI+"/thread/"+id+"/messages", tc.who, map[string]any{"content": tc.msg}); r.status != 200 {
				t.Fatalf("turn: %d %s", r.status, r.body)
			}
		}
		search := func(q string) string {
			t.Helper()
			r := s.do("GET", appAPI+"/thread?q="+url.QueryEscape(q), token, nil)
			if r.status != 200 {
				t.Fatalf("search %q: %d %s", q, r.status, r.body)
			}
			var out []string
			for _, th := range r.json(t)["data"].([]any) {
				th := th.(map[string]any)
				m := th["match"].(map[string]any)
				d := th["title"].(string) + "@" + m["in"].(string)
				if sn, ok := m["snippet"].(string); ok {
					d += ":" + sn
				}
				out = append(out, d)
			}
			return strings.Join(out, " | ")
		}
		for q, want := range map[string]string{
			"LISBON":        `Travel plans@message:Book the flight to Lisbon on Friday, "window" seat`,
			"budget":        "Budget 2027@title",
			"\"window\"":    `Travel plans@message:Book the flight to Lisbon on Friday, "window" seat`,
			"%":             "Misc@message:I am 100% sure",
			"type":          "", // a JSON field name of every stored message
			"text":          "",
			"b_dget":        "",
			"trip":          "", // Bob's
			"offline model": "",
		} {
			if got := search(q); got != want {
				t.Errorf("search %q: %q, want %q", q, got, want)
			}
		}
		for _, q := range []string{"?q=x&project_id=" + pid.(string), "?q=x&before=" + threads["Misc"], "?q=" + strings.Repeat("x", 201), "?q=%20%20"} {
			if r := s.do("GET", appAPI+"/thread"+q, token, nil); r.status != 400 {
				t.Errorf("GET /thread%s: %d %s", q[:min(len(q), 40)], r.status, r.body)
			}
		}
	})
}

// TestE2EThreadSearch: the sidebar's search finds threads by
// title and by message text as the user types, with the match marked and
// a count announced; a result opens its thread; Escape clears it.
func TestE2EThreadSearch(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	pid := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Research"}).json(t)["id"]
	for title, msg := range map[string]string{"Budget 2027": "hello", "Travel plans": "Book the flight to Lisbon on Friday"} {
		id := s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": pid, "title": title}).json(t)["id"].(string)
		if r := s.do("POST", appAPI+"/thread/"+id+"/messages", token, map[string]any{"content": msg}); r.status != 200 {
			t.Fatalf("turn: %d %s", r.status, r.body)
		}
	}
	b := e2e.Start(t, 1440, 900)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("type a search", chromedp.Focus(chromedp.ID("thread-search")), chromedp.KeyEvent("lisbon"))
	b.WaitText("#search-status", "1 thread found.", 10*time.Second)
	got := e2e.Eval[string](b, "results", `[...document.querySelectorAll('.search-results a')].map(a =>
		a.querySelector('.found-title').textContent + ' / ' + a.querySelector('.snippet').textContent + ' / ' + a.querySelector('.snippet mark').textContent).join(' | ')`)
	if got != "Travel plans / Book the flight to Lisbon on Friday / Lisbon" {
		t.Errorf("results: %q", got)
	}
	everyControlLabelled(t, b, "search results")
	b.Do("open the result", chromedp.Click(chromedp.CSS(".search-results a")))
	b.WaitText("#thread-title", "Travel plans", 10*time.Second)

	b.Do("search a title with Enter", chromedp.Evaluate[chromedp.Void](`document.getElementById('thread-search').value = ''`), chromedp.Focus(chromedp.ID("thread-search")), chromedp.KeyEvent("BUDGET\r"))
	b.WaitText("#search-status", "1 thread found.", 10*time.Second)
	b.WaitText(".search-results .found-title mark", "Budget", 5*time.Second)
	b.Do("search what is nowhere", chromedp.Evaluate[chromedp.Void](`document.getElementById('thread-search').value = ''`), chromedp.Focus(chromedp.ID("thread-search")), chromedp.KeyEvent("zebra\r"))
	b.WaitText("#search-status", `No thread matches "zebra".`, 10*time.Second)
	if !e2e.Eval[bool](b, "no results", `document.querySelector('.search-results').hidden`) {
		t.Error("an empty result list is shown")
	}
	b.Do("search again", chromedp.Evaluate[chromedp.Void](`document.getElementById('thread-search').value = ''`), chromedp.KeyEvent("lisbon\r"))
	b.WaitText("#search-status", "thread found.", 10*time.Second)
	b.Do("press Escape", chromedp.KeyEvent(kb.Escape))
	b.WaitTrue("the search cleared", `document.getElementById('thread-search').value === '' && document.querySelector('.search-results').hidden && document.getElementById('search-status').textContent === ''`, 5*time.Second)
	b.SetViewport(375, 800)
	b.Do("open the sidebar", chromedp.Click(chromedp.ID("menu")), chromedp.WaitVisible(chromedp.ID("thread-search")))
	noHorizontalOverflow(t, b, 375)
}

// TestE2ESearchFollowsRenameAndDelete: the sidebar's search results
// stay true while they are shown: a thread renamed shows its new title
// there, and a thread deleted leaves them (once it stayed, a link to a
// thread that was gone).
func TestE2ESearchFollowsRenameAndDelete(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	pid := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Trips"}).json(t)["id"]
	var ids []string
	for _, title := range []string{"Lisbon flights", "Lisbon hotels"} {
		ids = append(ids, s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": pid, "title": title}).json(t)["id"].(string))
	}
	b := e2e.Start(t, 1440, 900)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("search", chromedp.Focus(chromedp.ID("thread-search")), chromedp.KeyEvent("lisbon\r"))
	b.WaitText("#search-status", "2 threads found.", 10*time.Second)
	results := `[...document.querySelectorAll('.search-results a')].map(a => a.textContent).sort().join(' | ')`

	b.Do("open the first thread", chromedp.Click(chromedp.CSS(fmt.Sprintf(`.search-results a[data-thread-id=%q]`, ids[0]))))
	b.WaitText("#thread-title", "Lisbon flights", 10*time.Second)
	b.Do("rename it", chromedp.Click(chromedp.CSS(".thread-head .rename")), chromedp.WaitVisible(chromedp.ID("dialog-input")),
		chromedp.SetValue(chromedp.ID("dialog-input"), "Lisbon flights, booked"), chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitText("#thread-title", "Lisbon flights, booked", 10*time.Second)
	b.WaitTrue("the new title among the results", results+` === 'Lisbon flights, booked | Lisbon hotels'`, 10*time.Second)

	b.Do("delete it", chromedp.Click(chromedp.CSS(".thread-head button.danger")), chromedp.WaitVisible(chromedp.ID("dialog-ok")), chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitTrue("the welcome page", `!!document.querySelector('.home')`, 10*time.Second)
	b.WaitTrue("the deleted thread gone from the results", results+` === 'Lisbon hotels' && document.getElementById('search-status').textContent === '1 thread found.'`, 10*time.Second)
}

// TestE2EThreadKeepsTheUsersFocus: a thread focuses its message box once
// its history, files and artifacts are in, unless the user put the focus
// elsewhere meanwhile: a search typed while the thread loads stays in the
// search field.
func TestE2EThreadKeepsTheUsersFocus(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, _ := apiThread(t, s, "Slow", "Slow to load")
	b := e2e.Start(t, 1440, 900)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	// The page's requests for the thread's file list wait until the test
	// lets them go: the thread is still loading while the user types.
	b.Do("hold the thread's file list", chromedp.Evaluate[chromedp.Void](`(() => {
		const real = window.fetch;
		let held = [];
		window.releaseFiles = () => { const h = held; held = null; h.forEach((go) => go()); };
		window.fetch = (url, init) => held && String(url).includes('/files?scope_id=')
			? new Promise((go) => held.push(go)).then(() => real(url, init))
			: real(url, init);
	})()`))
	b.Do("open the thread", chromedp.Evaluate[chromedp.Void](`location.hash = '#/thread/`+tid+`'`))
	b.WaitText("#thread-title", "Slow to load", 10*time.Second)
	b.Do("type a search while it loads", chromedp.Focus(chromedp.ID("thread-search")), chromedp.KeyEvent("slow"))
	b.Do("let the file list in", chromedp.Evaluate[chromedp.Void](`window.releaseFiles()`))
	b.WaitText(`ul[aria-label="Thread files"] .empty`, "No files yet.", 10*time.Second)
	if got := e2e.Eval[string](b, "focus", `document.activeElement.id + ' ' + document.getElementById('thread-search').value`); got != "thread-search slow" {
		t.Errorf("after the thread loaded, the focus and the search field: %q, want %q", got, "thread-search slow")
	}
	// Opened with the focus left where it was, the thread focuses its
	// message box.
	b.Do("open it again", chromedp.Evaluate[chromedp.Void](`location.hash = '#/'`), chromedp.Evaluate[chromedp.Void](`document.activeElement.blur(); location.hash = '#/thread/`+tid+`'`))
	b.WaitText("#thread-title", "Slow to load", 10*time.Second)
	if _, err := chromedp.Run(b.Context(), chromedp.Poll[bool](`document.activeElement && document.activeElement.id === 'message'`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Errorf("a thread opened with nothing else focused did not focus its message box: %v", err)
	}
}

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"threadbox/e2e"
)

// TestE2ESessions: a signed-in browser stays signed in across a
// reload and in a new tab, with no token in any storage a script could
// read; the refresh endpoint refuses the page's own call without the
// custom header; signing out in one tab signs the other out at its next
// request (and nothing of that request is done); a session ends by its
// clock with a clear message.
func TestE2ESessions(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	b, tid, token := threadPage(t, s, "Kept", "Across tabs", 1440, 900)
	b.WaitText("#thread-title", "Across tabs", 10*time.Second)

	// A reload keeps the session: the thread is shown again, not the
	// sign-in form.
	b.Do("reload", chromedp.Reload())
	b.WaitText("#thread-title", "Across tabs", 10*time.Second)
	if got := e2e.Eval[string](b, "who", `document.getElementById('who').textContent`); got != e2eEmail+" (admin)" {
		t.Errorf("after a reload the signed-in user is shown as %q", got)
	}
	// No token where a script (or an XSS) could read it.
	if got := e2e.Eval[string](b, "storage", `[sessionStorage.length, localStorage.length, JSON.stringify(document.cookie)].join(' ')`); got != `0 0 ""` {
		t.Errorf("storage and cookies the page can read: %s", got)
	}
	// The page itself cannot refresh without the custom header.
	if got := e2e.Eval[int](b, "refresh without the header", `fetch('/api/v1/app/auth/refresh', {method: 'POST'}).then(r => r.status)`); got != 403 {
		t.Errorf("refresh without X-Threadbox-Refresh: %d", got)
	}

	// A new tab of the same browser is signed in too.
	tab, closeTab := chromedp.NewContext(b.Context())
	defer closeTab()
	// The first action opens the tab and must get the tab's own context:
	// a context derived from it, once done, would close the tab.
	if err := chromedp.Do(tab, chromedp.EmulateViewport(1440, 900)); err != nil {
		t.Fatalf("open a second tab: %v", err)
	}
	inTab := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, e2e.DefaultTimeout)
		defer cancel()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("second tab: %s: %v", what, err)
		}
	}
	waitInTab := func(what, expr string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, 15*time.Second)
		defer cancel()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool]("!!("+expr+")", chromedp.WithPollingTimeout(10*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
			t.Fatalf("second tab: waiting for %s: %v", what, err)
		}
	}
	inTab("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	// The thread view focuses its message box once its history, files,
	// artifacts and terminals are loaded: until then a load of the second
	// tab could be the request that finds the sign-out below.
	waitInTab("the thread, loaded", `document.getElementById('thread-title') && document.getElementById('thread-title').textContent.includes('Across tabs') && document.activeElement && document.activeElement.id === 'message'`)

	// Signing out in the first tab signs the second out at its next request.
	b.Do("sign out in the first tab", chromedp.Click(chromedp.ID("logout")))
	b.WaitText("#login-error", "You have signed out.", 10*time.Second)
	inTab("create a project in the second tab", chromedp.Focus(chromedp.ID("new-project")), chromedp.KeyEvent("After sign-out\r"))
	waitInTab("the second tab signed out", `document.getElementById('login-error') && document.getElementById('login-error').textContent.includes('Your session has expired or was revoked')`)
	for _, p := range s.do("GET", appAPI+"/project", token, nil).json(t)["data"].([]any) {
		if p.(map[string]any)["name"] == "After sign-out" {
			t.Error("the signed-out tab's request was carried out")
		}
	}
	inTab("reload the second tab", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("email")))

	// A session ends by its clock: the page says so when it passes.
	short := e2eServer(t, map[string]string{"SESSION_TTL": "4s"})
	b.Do("sign in for four seconds",
		chromedp.Navigate(short.base+"/"),
		chromedp.WaitVisible(chromedp.ID("email")),
		chromedp.SendKeys(chromedp.ID("email"), e2eEmail),
		chromedp.SendKeys(chromedp.ID("password"), e2ePassword),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("new-project")))
	b.WaitText("#login-error", "Your session has expired. Please sign in again.", 10*time.Second)
	if got := e2e.Eval[string](b, "who", `document.getElementById('who').textContent`); strings.TrimSpace(got) != "" {
		t.Errorf("after the session's end the page still shows %q signed in", got)
	}
}

// TestE2ESignOutForgetsTheSearch: signing out leaves nothing of the
// user's search in the page for whoever signs in next on the browser: no
// query, no results with the last user's thread titles and message text.
func TestE2ESignOutForgetsTheSearch(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	if r := s.do("POST", appAPI+"/org/users", token, map[string]any{"email": "bob@acme.test", "role": "member", "password": "bob-password-1"}); r.status != 201 {
		t.Fatalf("add bob: %d %s", r.status, r.body)
	}
	pid := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Shared"}).json(t)["id"]
	s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": pid, "title": "Salary review of Bob"})
	b := e2e.Start(t, 1440, 900)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("search", chromedp.Focus(chromedp.ID("thread-search")), chromedp.KeyEvent("salary\r"))
	b.WaitText("#search-status", "1 thread found.", 10*time.Second)
	b.Do("sign out", chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("email")))

	// In the same page, as the next person at the browser signs in.
	b.Do("sign in as Bob",
		chromedp.SendKeys(chromedp.ID("email"), "bob@acme.test"),
		chromedp.SendKeys(chromedp.ID("password"), "bob-password-1"),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("new-project")))
	b.WaitTrue("Bob's sidebar", `[...document.querySelectorAll('.project-name')].some(p => p.textContent.includes('Shared'))`, 10*time.Second)
	if got := e2e.Eval[string](b, "the search", `document.getElementById('thread-search').value + '|' + document.getElementById('search-status').textContent`); got != "|" {
		t.Errorf("the search field and status after another user's sign-out: %q", got)
	}
	if e2e.Eval[bool](b, "the sidebar", `document.getElementById('sidebar').textContent.includes('Salary')`) {
		t.Error("the sidebar shows the last user's thread to the next one")
	}
}

// TestE2EStaleRouteKeepsTheNewerPage: a thread's page that comes back
// after a later route began (the route after sign-in and a click, say)
// does not replace the page the later route showed, which may have sent a
// turn meanwhile.
func TestE2EStaleRouteKeepsTheNewerPage(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	b, tid, _ := threadPage(t, s, "Routes", "Twice", 1440, 1000)
	// The next load of the thread answers late; the one after it at once.
	e2e.Eval[bool](b, "slow the next thread load", `(() => {
		const orig = window.fetch;
		let slow = true;
		window.fetch = (input, init) => {
			const url = typeof input === 'string' ? input : input.url;
			if (slow && (!init || !init.method || init.method === 'GET') && url.endsWith('/thread/`+tid+`')) {
				slow = false;
				return new Promise((r) => setTimeout(r, 800)).then(() => orig(input, init)).finally(() => { window.staleLoaded = true; });
			}
			return orig(input, init);
		};
		document.querySelector('.thread-view').dataset.page = 'first';
		window.dispatchEvent(new HashChangeEvent('hashchange')); // the slow route
		window.dispatchEvent(new HashChangeEvent('hashchange')); // the later one
		return true;
	})()`)
	b.WaitTrue("the later route's page", `!!document.querySelector('.thread-view:not([data-page])')`, 10*time.Second)
	e2e.Eval[bool](b, "mark it", `(document.querySelector('.thread-view').dataset.page = 'later', true)`)
	b.WaitTrue("the slow route's load", `window.staleLoaded === true`, 10*time.Second)
	got := e2e.Eval[string](b, "the page after the slow route came back", `new Promise((r) => setTimeout(r, 300)).then(() => document.querySelector('.thread-view').dataset.page || 'replaced')`)
	if got != "later" {
		t.Errorf("the page shown is %q, want the later route's", got)
	}
}

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"threadbox/e2e"
)

// TestE2EAccountsAndThreads drives everything but code execution, so it
// needs no sandbox: keyboard-only sign-in with a visible focus ring, a
// wrong password, projects and threads created, renamed, forked and
// deleted, a user added on the admin page, sign-out revoking the token, a
// member who gets no admin page, and a session revoked on the server
// (expiry by the clock is TestE2ESessions'); layouts checked at 375 px.
func TestE2EAccountsAndThreads(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	b := e2e.Start(t, 1440, 900)

	// Keyboard only: the form focuses the email field, Tab moves on with a
	// visible focus ring, Enter submits.
	b.Do("open the login page", chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.ID("email")))
	b.WaitTrue("focus on the email field", `document.activeElement && document.activeElement.id === 'email'`, 5*time.Second)
	b.Do("type a wrong password", chromedp.KeyEvent(e2eEmail), chromedp.KeyEvent("\t"))
	if id := e2e.Eval[string](b, "focused", `document.activeElement.id`); id != "password" {
		t.Fatalf("Tab from the email field went to %q", id)
	}
	ring := e2e.Eval[string](b, "focus ring", `(() => { const s = getComputedStyle(document.activeElement); return s.outlineStyle + ' ' + s.outlineWidth; })()`)
	if !strings.HasPrefix(ring, "solid") || ring == "solid 0px" {
		t.Errorf("keyboard focus has no visible ring: outline %q", ring)
	}
	b.Do("submit", chromedp.KeyEvent("not the password"), chromedp.KeyEvent("\r"))
	b.WaitText("#login-error", "Wrong email or password.", 10*time.Second)
	everyControlLabelled(t, b, "login page")
	noHorizontalOverflow(t, b, 1440)
	b.SetViewport(375, 700)
	noHorizontalOverflow(t, b, 375)
	shoot(t, b, "login-375")
	b.SetViewport(1440, 900)
	b.Do("the right password",
		chromedp.Evaluate[chromedp.Void](`document.getElementById('password').value = ''`),
		chromedp.Focus(chromedp.ID("password")),
		chromedp.KeyEvent(e2ePassword+"\r"),
		chromedp.WaitVisible(chromedp.ID("new-project")))
	if got := e2e.Eval[string](b, "who", `document.getElementById('who').textContent`); got != e2eEmail+" (admin)" {
		t.Errorf("signed-in user shown as %q", got)
	}

	// A project, created from the keyboard, and renamed.
	b.Do("create a project", chromedp.Focus(chromedp.ID("new-project")), chromedp.KeyEvent("Alpha\r"))
	b.WaitText(".project .project-name", "Alpha", 10*time.Second)
	b.Do("rename the project",
		chromedp.Click(chromedp.CSS(`.project button[aria-label="Rename project Alpha"]`)),
		chromedp.WaitVisible(chromedp.ID("dialog-input")),
		chromedp.SetValue(chromedp.ID("dialog-input"), "Beta"),
		chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitText(".project .project-name", "Beta", 10*time.Second)
	// Escape closes a dialog without a change and focus returns to the
	// button that opened it.
	b.Do("open the rename dialog and press Escape",
		chromedp.Click(chromedp.CSS(`.project button[aria-label="Rename project Beta"]`)),
		chromedp.WaitVisible(chromedp.ID("dialog-input")),
		chromedp.SetValue(chromedp.ID("dialog-input"), "Not this"),
		chromedp.KeyEvent(kb.Escape),
		chromedp.WaitNotVisible(chromedp.ID("dialog-input")))
	if got := e2e.Eval[string](b, "focus after Escape", `document.activeElement.getAttribute('aria-label')`); got != "Rename project Beta" {
		t.Errorf("focus after Escape is on %q", got)
	}
	projects := s.do("GET", appAPI+"/project", token, nil).json(t)["data"].([]any)
	if len(projects) != 1 || projects[0].(map[string]any)["name"] != "Beta" {
		t.Fatalf("projects after the rename: %v", projects)
	}
	pid := projects[0].(map[string]any)["id"].(string)

	// A thread: created, renamed, forked, the fork deleted.
	b.Do("create a thread",
		chromedp.Click(chromedp.CSS(".project .new-thread")),
		chromedp.WaitVisible(chromedp.ID("dialog-input")),
		chromedp.SetValue(chromedp.ID("dialog-input"), "First"),
		chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitText("#thread-title", "First", 10*time.Second)
	b.Do("rename the thread",
		chromedp.Click(chromedp.CSS(".thread-head .actions button.rename")),
		chromedp.WaitVisible(chromedp.ID("dialog-input")),
		chromedp.SetValue(chromedp.ID("dialog-input"), "Renamed thread"),
		chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitText("#thread-title", "Renamed thread", 10*time.Second)
	b.WaitText(".threads", "Renamed thread", 10*time.Second)
	threads := func() []any {
		return s.do("GET", appAPI+"/thread?project_id="+pid, token, nil).json(t)["data"].([]any)
	}
	if ts := threads(); len(ts) != 1 || ts[0].(map[string]any)["title"] != "Renamed thread" {
		t.Fatalf("threads after the rename: %v", ts)
	}
	first := threads()[0].(map[string]any)["id"].(string)
	b.Do("fork the thread", chromedp.Click(chromedp.CSS(".thread-head .actions button.fork")))
	b.WaitTrue("the fork's page", fmt.Sprintf(`location.hash.startsWith('#/thread/') && location.hash !== '#/thread/%s'`, first), 10*time.Second)
	b.WaitTrue("two threads in the sidebar", `document.querySelectorAll('.threads a').length === 2`, 10*time.Second)
	if ts := threads(); len(ts) != 2 {
		t.Fatalf("threads after the fork: %v", ts)
	}
	loc := e2e.Run(b, "location", chromedp.Location())
	fork := loc[strings.Index(loc, "#/thread/")+len("#/thread/"):]
	b.WaitTrue("the fork's view", fmt.Sprintf(`document.querySelector('.thread-view[data-thread-id=%q]')`, fork), 10*time.Second)
	b.Do("delete the fork",
		chromedp.Click(chromedp.CSS(".thread-head .actions button.danger")),
		chromedp.WaitVisible(chromedp.ID("dialog-ok")),
		chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitTrue("back home with one thread", `location.hash === '#/' && document.querySelectorAll('.threads a').length === 1`, 10*time.Second)
	// The focus, which was on the dialog of a page that went, carries on
	// from the new page's heading, not from the start of the document.
	b.WaitTrue("the focus on the welcome page's heading", `document.activeElement === document.querySelector('.home h1')`, 5*time.Second)
	if r := s.do("GET", appAPI+"/thread/"+fork, token, nil); r.status != 404 {
		t.Fatalf("the deleted fork: %d %s", r.status, r.body)
	}
	// Cancelling the dialog deletes nothing.
	b.Do("open the thread and cancel a delete",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`.threads a[data-thread-id=%q]`, first))),
		chromedp.WaitVisible(chromedp.CSS(".thread-head .actions button.danger")),
		chromedp.Click(chromedp.CSS(".thread-head .actions button.danger")),
		chromedp.WaitVisible(chromedp.ID("dialog-cancel")),
		chromedp.Click(chromedp.ID("dialog-cancel")))
	if r := s.do("GET", appAPI+"/thread/"+first, token, nil); r.status != 200 {
		t.Fatalf("a cancelled delete deleted the thread: %d", r.status)
	}

	// Files dropped on the composer are uploaded, with progress shown while
	// a large one is on its way; the small one downloads from the files
	// panel byte for byte.
	b.ThrottleUploads(24 << 20) // the big file takes about two seconds
	b.Do("drop two files", chromedp.Evaluate[chromedp.Void](`(() => {
		window.progressSeen = [];
		new MutationObserver((ms) => {
			for (const m of ms) if (m.target.tagName === 'PROGRESS') window.progressSeen.push([Number(m.target.value), Number(m.target.max)]);
		}).observe(document.querySelector('.uploads'), { subtree: true, attributes: true, attributeFilter: ['value'] });
		const big = new Uint8Array(48 << 20);
		for (let i = 0; i < big.length; i += 4096) big[i] = i & 255;
		const dt = new DataTransfer();
		dt.items.add(new File(['hello from a drop\n'], 'notes.txt', { type: 'text/plain' }));
		dt.items.add(new File([big], 'big.bin', { type: 'application/octet-stream' }));
		window.dropFiles = (dt) => {
			const form = document.querySelector('form.composer');
			form.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
			form.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
		};
		window.dropFiles(dt);
	})()`))
	b.WaitText(`.upload[data-name="notes.txt"]`, "Uploaded to /mnt/user-data/uploads/notes.txt", 30*time.Second)
	b.WaitText(`.upload[data-name="big.bin"]`, "Uploaded to /mnt/user-data/uploads/big.bin", 60*time.Second)
	b.ThrottleUploads(0)
	if partial := e2e.Eval[int](b, "progress", `window.progressSeen.filter(([v, max]) => v > 0 && v < max && max >= 48 << 20).length`); partial == 0 {
		t.Errorf("no progress shown between 0 and the whole file: %v", e2e.Eval[any](b, "progress", `window.progressSeen`))
	}
	b.Do("download the dropped file",
		chromedp.WaitVisible(chromedp.CSS(`.file-list li[data-path="/mnt/user-data/uploads/notes.txt"] button.download`)),
		chromedp.Click(chromedp.CSS(`.file-list li[data-path="/mnt/user-data/uploads/notes.txt"] button.download`)))
	if got := b.WaitDownload("notes.txt", 20*time.Second); string(got) != "hello from a drop\n" {
		t.Errorf("downloaded notes.txt: %q", got)
	}

	// With uploads switched off by the admin, a drop is refused with a
	// message that names the feature.
	if r := s.do("PATCH", appAPI+"/org/features", token, map[string]any{"uploads": map[string]any{"enabled": false}}); r.status != 200 {
		t.Fatalf("switch off uploads: %d %s", r.status, r.body)
	}
	b.Do("drop a file with uploads off", chromedp.Evaluate[chromedp.Void](`(() => {
		const dt = new DataTransfer();
		dt.items.add(new File(['late'], 'late.txt', { type: 'text/plain' }));
		window.dropFiles(dt);
	})()`))
	b.WaitText(`.upload.failed[data-name="late.txt"]`, "Refused: your organization's admin has switched off file uploads (uploads).", 20*time.Second)
	if r := s.do("PATCH", appAPI+"/org/features", token, map[string]any{"uploads": map[string]any{"enabled": true}}); r.status != 200 {
		t.Fatalf("switch uploads back on: %d %s", r.status, r.body)
	}

	// A second project, deleted from the sidebar.
	b.Do("create a second project", chromedp.Focus(chromedp.ID("new-project")), chromedp.KeyEvent("Gamma\r"))
	b.WaitTrue("two projects", `document.querySelectorAll('.project').length === 2`, 10*time.Second)
	b.Do("delete it",
		chromedp.Click(chromedp.CSS(`.project button[aria-label="Delete project Gamma"]`)),
		chromedp.WaitVisible(chromedp.ID("dialog-ok")),
		chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitTrue("one project", `document.querySelectorAll('.project').length === 1`, 10*time.Second)
	if ps := s.do("GET", appAPI+"/project", token, nil).json(t)["data"].([]any); len(ps) != 1 || ps[0].(map[string]any)["name"] != "Beta" {
		t.Fatalf("projects after the delete: %v", ps)
	}

	// A plain message gets the offline model's answer, streamed; a turn
	// the server refuses (its thread deleted meanwhile) shows the error and
	// gives the text back to the composer.
	// Made with the default title: its first message gives it one.
	scratch := s.do("POST", appAPI+"/thread", token, map[string]string{"project_id": pid})
	if scratch.status != 201 {
		t.Fatalf("create a thread: %d %s", scratch.status, scratch.body)
	}
	sid := scratch.json(t)["id"].(string)
	b.Do("open the scratch thread", chromedp.Navigate(s.base+"/#/thread/"+sid), chromedp.WaitVisible(chromedp.ID("message")))
	b.WaitTrue("the scratch thread's view", fmt.Sprintf(`document.querySelector('.thread-view[data-thread-id=%q]')`, sid), 10*time.Second)
	// Shift+Enter starts a new line; Enter sends.
	b.Do("write two lines", chromedp.Focus(chromedp.ID("message")), chromedp.KeyEvent("hello"),
		chromedp.KeyEvent("\r", chromedp.KeyModifiers(kb.ModifierShift)), chromedp.KeyEvent("there"))
	if got := e2e.Eval[string](b, "composer", `document.getElementById('message').value`); got != "hello\nthere" {
		t.Errorf("Shift+Enter: the composer holds %q", got)
	}
	if n := e2e.Eval[int](b, "messages", `document.querySelectorAll('.msg').length`); n != 0 {
		t.Errorf("Shift+Enter sent the message (%d messages)", n)
	}
	b.Do("send with Enter", chromedp.KeyEvent("\r"))
	b.WaitText(".msg.assistant .text", "offline runner model", 30*time.Second)
	// The thread, made with the default title, takes its first message's.
	b.WaitText("#thread-title", "hello", 10*time.Second)
	if got := e2e.Eval[string](b, "sent", `document.querySelector('.msg.user').textContent`); !strings.Contains(got, "hello\nthere") && !strings.Contains(got, "hellothere") {
		t.Errorf("the message sent: %q", got)
	}
	if got := e2e.Eval[string](b, "composer", `document.getElementById('message').value`); got != "" {
		t.Errorf("the composer still holds %q after a sent message", got)
	}
	if r := s.do("DELETE", appAPI+"/thread/"+sid, token, nil); r.status != 204 {
		t.Fatalf("delete the scratch thread: %d %s", r.status, r.body)
	}
	// The refusal shows once, in the page's notice; the conversation keeps
	// only what is stored, so sending the given-back text again shows it
	// no second time.
	for round := 1; round <= 2; round++ {
		b.Do("send to the deleted thread", chromedp.SetValue(chromedp.ID("message"), "again"), chromedp.Click(chromedp.ID("send")))
		b.WaitTrue("the refusal", `!document.getElementById('notice').hidden && document.getElementById('notice-text').textContent !== '' && !document.getElementById('send').disabled`, 20*time.Second)
		if got := e2e.Eval[string](b, "composer", `document.getElementById('message').value`); got != "again" {
			t.Errorf("send %d: the refused message was not given back: composer holds %q", round, got)
		}
		if got := e2e.Eval[string](b, "conversation", `[...document.querySelectorAll('.msg')].map((m) => (m.classList.contains('user') ? 'user' : 'assistant') + (m.querySelector('.turn-error') ? ' with an error' : '')).join(', ')`); got != "user, assistant" {
			t.Errorf("send %d: the conversation after a refused message: %s; want the stored message and its answer alone", round, got)
		}
		b.Do("dismiss the notice", chromedp.Click(chromedp.ID("notice-close")))
	}
	b.Do("back home", chromedp.Navigate(s.base+"/#/"), chromedp.WaitVisible(chromedp.ID("new-project")))

	// The admin page adds a member.
	b.Do("add a member",
		chromedp.Click(chromedp.ID("nav-admin")),
		chromedp.WaitVisible(chromedp.ID("nu-email")),
		chromedp.SendKeys(chromedp.ID("nu-email"), "bob@acme.test"),
		chromedp.SendKeys(chromedp.ID("nu-password"), "bob-password-1"),
		chromedp.Click(chromedp.CSS(".new-user button[type=submit]")))
	b.WaitText("#users", "bob@acme.test", 10*time.Second)
	everyControlLabelled(t, b, "admin page")
	if users := s.do("GET", appAPI+"/org/users", token, nil); !strings.Contains(string(users.body), `"email":"bob@acme.test","role":"member"`) {
		t.Fatalf("users after the add: %s", users.body)
	}
	b.SetViewport(375, 800)
	noHorizontalOverflow(t, b, 375)
	shoot(t, b, "admin-375")
	// At 375 px the sidebar folds behind the Projects button, opens with
	// it, and folds again once a thread is chosen.
	if e2e.Eval[bool](b, "sidebar", `!document.getElementById('sidebar').hidden`) {
		t.Error("at 375 px the sidebar is open before the Projects button is pressed")
	}
	b.Do("open the sidebar", chromedp.Click(chromedp.ID("menu")), chromedp.WaitVisible(chromedp.CSS(`.threads a`)))
	if got := e2e.Eval[string](b, "menu state", `document.getElementById('menu').getAttribute('aria-expanded')`); got != "true" {
		t.Errorf("Projects button aria-expanded %q after opening", got)
	}
	// Not the scratch thread, deleted meanwhile by another client.
	b.Do("choose a thread", chromedp.Click(chromedp.CSS(fmt.Sprintf(`.threads a:not([data-thread-id=%q])`, sid))), chromedp.WaitVisible(chromedp.ID("message")))
	b.WaitTrue("the sidebar folded", `document.getElementById('sidebar').hidden && document.getElementById('menu').getAttribute('aria-expanded') === 'false'`, 5*time.Second)
	noHorizontalOverflow(t, b, 375)
	b.SetViewport(1440, 900)
	b.WaitTrue("the sidebar back at 1440 px", `!document.getElementById('sidebar').hidden`, 5*time.Second)

	// Signing out revokes the session: an access token of it, asked for
	// with the page's refresh cookie, is refused afterwards.
	session := e2e.Eval[string](b, "session", pageAccessToken)
	b.Do("sign out", chromedp.Click(chromedp.ID("logout")))
	b.WaitText("#login-error", "You have signed out.", 10*time.Second)
	if r := s.do("GET", appAPI+"/me", session, nil); r.status != 401 {
		t.Errorf("the signed-out token still works: %d %s", r.status, r.body)
	}

	if r := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Admin's plan"}); r.status != 201 {
		t.Fatalf("the admin's project: %d %s", r.status, r.body)
	}
	// A member has no admin page.
	b.Do("sign in as the member",
		chromedp.SendKeys(chromedp.ID("email"), "bob@acme.test"),
		chromedp.SendKeys(chromedp.ID("password"), "bob-password-1"),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("new-project")))
	if visible := e2e.Eval[bool](b, "admin link", `!document.getElementById('nav-admin').hidden`); visible {
		t.Error("a member sees the admin link")
	}
	// Projects are shared, but only their owner or an admin may rename or
	// delete them: a member is not offered either on the admin's project.
	b.WaitTrue("the admin's project", `[...document.querySelectorAll('.project')].some(p => p.textContent.includes("Admin's plan"))`, 10*time.Second)
	if n := e2e.Eval[int](b, "project actions", `[...document.querySelectorAll('.project')].filter(p => p.textContent.includes("Admin's plan") && p.querySelector('.project-actions')).length`); n != 0 {
		t.Errorf("Rename/Delete offered to a member on the admin's project")
	}
	b.Do("open the admin page by hand", chromedp.Navigate(s.base+"/#/admin"))
	b.WaitText("main", "Only organization admins may do this.", 10*time.Second)

	// With code execution switched off, a member's code blocks do not run,
	// and the page names the feature that may be off (a member cannot read
	// the policy).
	if r := s.do("PATCH", appAPI+"/org/features", token, map[string]any{"codeExecution": map[string]any{"enabled": false}}); r.status != 200 {
		t.Fatalf("switch off code execution: %d %s", r.status, r.body)
	}
	b.Do("a member's thread",
		chromedp.Navigate(s.base+"/#/"),
		chromedp.WaitVisible(chromedp.ID("new-project")),
		chromedp.Focus(chromedp.ID("new-project")),
		chromedp.KeyEvent("Bob's\r"))
	// The new project's "New thread" button takes the focus; Enter presses
	// it, and Enter in the dialog's field means OK.
	b.WaitTrue("focus on New thread", `document.activeElement.classList.contains('new-thread')`, 10*time.Second)
	b.Do("new thread from the keyboard",
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.ID("dialog-input")),
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.ID("message")))
	// The new thread opens with the composer focused (focus used to fall
	// to the page's body).
	b.WaitTrue("focus on the composer", `document.activeElement && document.activeElement.id === 'message'`, 5*time.Second)
	if n := e2e.Eval[int](b, "own project's actions", `[...document.querySelectorAll('.project')].filter(p => p.textContent.includes("Bob's") && p.querySelector('.project-actions')).length`); n != 1 {
		t.Errorf("the member's own project offers Rename/Delete %d times", n)
	}
	b.Do("send code with code execution off",
		chromedp.SetValue(chromedp.ID("message"), "```python\nprint(6 * 7)\n```"),
		chromedp.Click(chromedp.ID("send")))
	b.WaitText(".msg.assistant .turn-note", "Code was not run: your organization's admin has switched off code execution (codeExecution)", 30*time.Second)
	b.WaitText(".policy-note", "switched off by your organization's admin (codeExecution)", 10*time.Second)
	if n := e2e.Eval[int](b, "code cards", `document.querySelectorAll('.exec').length`); n != 0 {
		t.Errorf("%d code cards with code execution off", n)
	}

	// A session revoked on the server (here by the member through the API)
	// ends the page's at its next request, with a clear message.
	b.Do("revoke the member's session", chromedp.Evaluate[chromedp.Void](`(async () => {
		const s = await (await fetch('/api/v1/app/auth/refresh', {method: 'POST', headers: {'X-Threadbox-Refresh': '1'}})).json();
		await fetch('/api/v1/app/tokens/' + s.id, {method: 'DELETE', headers: {Authorization: 'Bearer ' + s.token}});
	})()`, chromedp.EvalAwaitPromise))
	// The page's own request on that navigation may meet the revocation
	// first; otherwise the member's next action does.
	const signedOut = `(document.querySelector('#login-error')?.textContent || '').includes('Please sign in again')`
	b.Do("back to the projects", chromedp.Navigate(s.base+"/#/"))
	b.WaitTrue("the projects or the sign-in", signedOut+` || !!document.querySelector('#new-project')`, 10*time.Second)
	if !e2e.Eval[bool](b, "signed out", signedOut) {
		b.Do("a request of the revoked session",
			chromedp.Evaluate[chromedp.Void](`document.querySelector('#new-project')?.focus()`),
			chromedp.KeyEvent("Too late\r"))
	}
	b.WaitText("#login-error", "Your session has expired or was revoked. Please sign in again.", 10*time.Second)
	// That message is all the page says: the refused request's own error,
	// the server's words, shows neither in the notice nor anywhere else.
	// The request's caller gets its error just after the sign-in form is
	// drawn, so the page is read after a pause that lets it show; the page
	// shows errors as sentences, so any case of the words counts.
	const rawError = "invalid or expired authentication token"
	shown := e2e.Eval[string](b, "the page after the sign-in message", fmt.Sprintf(`new Promise((resolve) => setTimeout(() => {
		const notice = document.getElementById('notice');
		if (!notice.hidden && notice.textContent.toLowerCase().includes(%[1]q)) resolve('in the notice');
		else if (document.body.innerText.toLowerCase().includes(%[1]q)) resolve('on the page');
		else resolve('');
	}, 1000))`, rawError))
	if shown != "" {
		t.Errorf("the raw error %q shows %s beside the sign-in message", rawError, shown)
	}
}

// pageAccessToken is a script that resolves to a new access token of the
// page's browser session, asked for with its refresh cookie.
const pageAccessToken = `fetch('/api/v1/app/auth/refresh', {method: 'POST', headers: {'X-Threadbox-Refresh': '1'}}).then(r => r.json()).then(s => s.token)`

// TestE2EAdminUsersAndAudit: bugs of the admin page found walking through
// it. A user added without a password is said to be unable to
// sign in, in the notice and in their row, until one is set; the password
// dialog hides what is typed; the audit log shows a password reset as a
// change, with the actor and the user it is about by email; an admin who
// sets their own password stays signed in, keeps their API tokens, and
// their other sessions end.
func TestE2EAdminUsersAndAudit(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	other := apiLogin(t, s, e2eEmail, e2ePassword) // another session of the admin
	api := s.do("POST", appAPI+"/tokens", other, map[string]any{"name": "laptop"}).json(t)["token"].(string)
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open the admin page", chromedp.Click(chromedp.ID("nav-admin")), chromedp.WaitVisible(chromedp.ID("nu-email")))

	b.Do("add a user without a password",
		chromedp.SendKeys(chromedp.ID("nu-email"), "nopw@acme.test"),
		chromedp.Click(chromedp.CSS(".new-user button[type=submit]")))
	b.WaitText("#notice-text", "cannot sign in until you set a password", 10*time.Second)
	row := `#users tr:has(td:first-child)`
	b.WaitTrue("the row says so", `[...document.querySelectorAll('`+row+`')].some(r => r.textContent.includes('nopw@acme.test') && r.textContent.includes('No password: cannot sign in'))`, 10*time.Second)

	// A switch toggled from the keyboard keeps the focus when the page
	// draws the switches again (it fell to the page's body).
	b.Do("toggle a switch from the keyboard", chromedp.Focus(chromedp.ID("f-generated")), chromedp.KeyEvent(" "))
	b.WaitText(".admin .saved", "downloads of generated files off", 10*time.Second)
	if id := e2e.Eval[string](b, "focus", `document.activeElement ? document.activeElement.id : ''`); id != "f-generated" {
		t.Errorf("after toggling a switch the focus is on %q", id)
	}
	b.Do("set their password", chromedp.Click(chromedp.CSS(`button[aria-label="Set password of nopw@acme.test"]`)), chromedp.WaitVisible(chromedp.ID("dialog-input")))
	if typ := e2e.Eval[string](b, "field type", `document.getElementById('dialog-input').type`); typ != "password" {
		t.Errorf("the password field shows what is typed (type %q)", typ)
	}
	b.Do("type it", chromedp.SendKeys(chromedp.ID("dialog-input"), "a-new-password"), chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitTrue("the row no longer says so", `[...document.querySelectorAll('`+row+`')].some(r => r.textContent.includes('nopw@acme.test') && !r.textContent.includes('No password'))`, 10*time.Second)
	apiLogin(t, s, "nopw@acme.test", "a-new-password")

	b.Do("refresh the audit log", chromedp.Click(chromedp.ID("audit-refresh")))
	b.WaitTrue("the reset in the audit log", `[...document.querySelectorAll('#audit tr')].some(r => r.textContent.includes('org.users.update') && r.querySelector('.actor').textContent === '`+e2eEmail+`' && r.querySelector('.target').textContent === 'nopw@acme.test' && r.textContent.includes('password_set'))`, 10*time.Second)

	// The admin's own password: this session stays, the other one ends,
	// the API token stays.
	b.Do("set my own password", chromedp.Click(chromedp.CSS(`button[aria-label="Set password of `+e2eEmail+`"]`)), chromedp.WaitVisible(chromedp.ID("dialog-input")))
	if note := e2e.Eval[string](b, "warning", `document.getElementById('dialog-text').textContent`); !strings.Contains(note, "other sessions will be signed out") {
		t.Errorf("setting one's own password warns %q", note)
	}
	b.Do("type it", chromedp.SendKeys(chromedp.ID("dialog-input"), "my-new-password"), chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitTrue("still on the admin page, signed in", `!!document.getElementById('nu-email') && !document.getElementById('login')`, 10*time.Second)
	// The page shows nothing when the server has made the change (hashing
	// the password takes long on a slow machine): the other session ends
	// then.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := s.do("GET", appAPI+"/me", other, nil)
		if r.status == 401 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admin's other session after their own password change: %d", r.status)
		}
	}
	b.Do("reload the users", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("nav-admin")))
	if r := s.do("GET", appAPI+"/me", api, nil); r.status != 200 {
		t.Errorf("the admin's API token after their own password change: %d %s", r.status, r.body)
	}
	apiLogin(t, s, e2eEmail, "my-new-password")
}

// TestE2EUploadLimitsBeforeSending: the chat refuses a file over the org's
// upload limit before sending a byte (it once sent the whole file to be
// told so), and its file picker is off while the org has uploads off.
func TestE2EUploadLimitsBeforeSending(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	if r := s.do("PATCH", appAPI+"/org/features", token, map[string]any{"uploads": map[string]any{"maxBytes": 1 << 20}}); r.status != 200 {
		t.Fatalf("limit: %d %s", r.status, r.body)
	}
	p := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Limits"})
	th := s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": p.json(t)["id"], "title": "Big"})
	tid := th.json(t)["id"].(string)
	big := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	open := func() {
		b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	}
	open()
	b.Do("pick a file over the limit", chromedp.SetUploadFiles(chromedp.ID("file-input"), []string{big}))
	b.WaitText(`.upload[data-name="big.bin"]`, "Refused: 2.0 MB is more than the upload limit of 1.0 MB.", 10*time.Second)
	if r := s.do("GET", "/api/gpt/v1/files?scope_id="+tid, token, nil); r.status != 200 || strings.Contains(string(r.body), "big.bin") {
		t.Fatalf("the refused file reached the thread: %d %s", r.status, r.body)
	}

	if r := s.do("PATCH", appAPI+"/org/features", token, map[string]any{"uploads": map[string]any{"enabled": false}}); r.status != 200 {
		t.Fatalf("uploads off: %d %s", r.status, r.body)
	}
	b.Do("reload", chromedp.Reload())
	open()
	b.WaitTrue("the picker is off", `document.getElementById('file-input').disabled`, 10*time.Second)
}

// TestE2EMarkdown: a message renders as Markdown — a table, a list, a link
// and a fenced python block as elements, the code highlighted with a copy
// button that copies it — and what could run script or leave the page
// quietly is neutralised: an <img onerror> shows as its text, a
// javascript: link loses its target.
func TestE2EMarkdown(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, token := apiThread(t, s, "Docs", "Markdown")
	msg := "# Totals\n\n| region | total |\n|---|---|\n| North | 40 |\n\n- one\n- two\n\n[docs](https://example.com/docs) and [bad](javascript:alert(1))\n\n" +
		"<img src=x onerror=\"window.pwned=1\">\n\n```python\nprint('hi')\n```\n"
	if r := s.do("POST", appAPI+"/thread/"+tid+"/messages", token, map[string]any{"content": msg}); r.status != 200 {
		t.Fatalf("turn: %d %s", r.status, r.body)
	}
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		ctx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
		_, err := chromedp.CallBrowser(ctx, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: name}, Setting: browser.PermissionSettingGranted, Origin: s.base})
		cancel()
		if err != nil {
			t.Fatalf("grant %s: %v", name, err)
		}
	}
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	user := `.msg.user .md`
	b.WaitTrue("the rendered message", `!!document.querySelector('`+user+` table')`, 10*time.Second)
	got := e2e.Eval[string](b, "elements", `(() => { const m = document.querySelector('`+user+`');
		return [m.querySelector('h1') && m.querySelector('h1').textContent, m.querySelector('td') && m.querySelector('td').textContent,
			m.querySelectorAll('li').length, m.querySelector('a[href^="https://example.com"]').rel,
			!!m.querySelector('a[href^="javascript:"]'), !!m.querySelector('img') || !m.textContent.includes('<img src=x'), String(window.pwned),
			!!m.querySelector('pre code.hljs .hljs-built_in, pre code.hljs span')].join(' | '); })()`)
	if got != "Totals | North | 2 | noopener noreferrer | false | false | undefined | true" {
		t.Errorf("the rendered markdown: %q", got)
	}
	b.Do("copy the code", chromedp.Click(chromedp.CSS(user+` button.copy`)))
	b.WaitText(user+" .copy-status", "Copied", 5*time.Second)
	if got := e2e.Eval[string](b, "clipboard", `navigator.clipboard.readText()`); got != "print('hi')\n" && got != "print('hi')" {
		t.Errorf("the clipboard holds %q", got)
	}
	// Nothing unsanitized reached the page: the CSP had nothing to refuse.
	for _, m := range b.Console() {
		if strings.Contains(m, "Content Security Policy") {
			t.Errorf("the browser refused something the page inserted: %s", m)
		}
	}
}

// TestE2EWideTableScrolls: at 375 px a Markdown table wider than its
// message keeps its words whole and scrolls sideways, from the keyboard
// too; it was squeezed into the message, a letter or two a line.
func TestE2EWideTableScrolls(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, token := apiThread(t, s, "Tables", "Wide")
	msg := "| region | total | first | second | third | fourth | remarks |\n|---|---|---|---|---|---|---|\n| Northeastern | 40 | 10 | 10 | 10 | 10 | steady |\n"
	if r := s.do("POST", appAPI+"/thread/"+tid+"/messages", token, map[string]any{"content": msg}); r.status != 200 {
		t.Fatalf("turn: %d %s", r.status, r.body)
	}
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.SetViewport(375, 812)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	b.WaitTrue("the table", `!!document.querySelector('.msg.user .md table')`, 10*time.Second)
	// A word on one line has one box.
	split := e2e.Eval[string](b, "words split", `[...document.querySelectorAll('.msg.user .md table th, .msg.user .md table td')].filter((c) => {
		const r = document.createRange(); r.selectNodeContents(c); return r.getClientRects().length > 1; }).map((c) => c.textContent).join(' ')`)
	if split != "" {
		t.Errorf("cells whose word is split across lines: %s", split)
	}
	if got := e2e.Eval[string](b, "the scroller", `(() => { const t = document.querySelector('.msg.user .md table');
		for (let e = t; e && !e.classList.contains('md'); e = e.parentElement) if (e.scrollWidth > e.clientWidth) return e.tabIndex + ' ' + (e.getAttribute('aria-label') || '');
		return 'none'; })()`); got != "0 Table" {
		t.Errorf("what scrolls the table sideways (tab index, name): %q, want %q", got, "0 Table")
	}
	noHorizontalOverflow(t, b, 375)
	for _, v := range b.Axe("a wide table at 375 px") {
		t.Errorf("%s", v)
	}
}

// TestE2EDarkThemeAndTimestamps: the page follows the system's dark
// setting (its own colours, not the light theme's), and every message says
// when it was sent.
func TestE2EDarkThemeAndTimestamps(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, token := apiThread(t, s, "Night", "Late")
	if r := s.do("POST", appAPI+"/thread/"+tid+"/messages", token, map[string]any{"content": "hello"}); r.status != 200 {
		t.Fatalf("turn: %d %s", r.status, r.body)
	}
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	b.WaitTrue("two messages", `document.querySelectorAll('.msg').length === 2`, 10*time.Second)
	if n := e2e.Eval[int](b, "timestamps", `[...document.querySelectorAll('.msg time.sent-at')].filter(t => !isNaN(new Date(t.getAttribute('datetime'))) && t.textContent.length > 4).length`); n != 2 {
		t.Errorf("%d of 2 messages say when they were sent", n)
	}
	light := e2e.Eval[string](b, "light", `getComputedStyle(document.documentElement).backgroundColor`)
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
	_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
	cancel()
	if err != nil {
		t.Fatalf("the system goes dark: %v", err)
	}
	// The page follows the system's setting as it changes (theme.js hears
	// the change within a frame).
	if light == "rgb(21, 24, 29)" {
		t.Errorf("the light page's background is the dark one: %s", light)
	}
	b.WaitTrue("the dark background", `getComputedStyle(document.documentElement).backgroundColor === 'rgb(21, 24, 29)'`, 5*time.Second)
}

// TestE2EPageTitle: the browser tab names what the page shows: a thread
// by its title, again once it is renamed, and the sign-in form once the
// user signed out (it kept the last page's name).
func TestE2EPageTitle(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	b, _, _ := threadPage(t, s, "Tabs", "Draft", 1440, 900)
	b.WaitTrue("the thread's name on the tab", `document.title === 'Draft — threadbox'`, 10*time.Second)
	b.Do("rename it", chromedp.Click(chromedp.CSS(".thread-head .rename")), chromedp.WaitVisible(chromedp.ID("dialog-input")),
		chromedp.SetValue(chromedp.ID("dialog-input"), "Final plan"), chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitText("#thread-title", "Final plan", 10*time.Second)
	b.WaitTrue("the new name on the tab", `document.title === 'Final plan — threadbox'`, 5*time.Second)
	b.Do("sign out", chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("email")))
	if got := e2e.Eval[string](b, "the tab", `document.title`); got != "Sign in — threadbox" {
		t.Errorf("after signing out the tab says %q", got)
	}
}

// TestE2ENoticeInView: the page's notice shows where the user is: a
// refusal of something done far down the admin page (a password too short
// for a user, at 375 px) is in view, not at the top of the page, above
// the fold, while the dialog closes without a word.
func TestE2ENoticeInView(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	if r := s.do("POST", appAPI+"/org/users", token, map[string]any{"email": "bob@acme.test", "role": "member"}); r.status != 201 {
		t.Fatalf("add bob: %d %s", r.status, r.body)
	}
	b := e2e.Start(t, 1440, 1000)
	emulateScheme(t, b, "dark")
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.SetViewport(375, 812)
	b.Do("open the admin page", chromedp.Navigate(s.base+"/#/admin"), chromedp.WaitVisible(chromedp.ID("f-code")))
	bob := `#users tbody tr:last-child button`
	b.WaitText("#users tbody tr:last-child", "bob@acme.test", 10*time.Second)
	b.Do("set a short password", chromedp.Evaluate[chromedp.Void](`document.querySelector('#audit').scrollIntoView()`),
		chromedp.Click(chromedp.CSS(bob)), chromedp.WaitVisible(chromedp.ID("dialog-input")),
		chromedp.SetValue(chromedp.ID("dialog-input"), "short"), chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitText("#notice-text", "Password must be at least 8 characters", 10*time.Second)
	if got := e2e.Eval[string](b, "where the notice is", `(() => { const r = document.getElementById('notice').getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight ? 'in view' : 'at ' + Math.round(r.top) + '..' + Math.round(r.bottom) + ' of ' + innerHeight; })()`); got != "in view" {
		t.Errorf("the refusal's notice is out of view: %s", got)
	}
	shoot(t, b, "notice-375")
	noHorizontalOverflow(t, b, 375)
}

package main

// Browser tests of the page as a user meets it at its limits: a window
// 280 px wide, and names and text that are long, or that look like markup.

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	msgwire "threadbox/app/messages/wire"
	"threadbox/e2e"
	"threadbox/infra/llm/fakeupstream"
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
	b, tid, token := threadPage(t, s, "Errors", "Gone soon", 1440, 900)

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

// TestE2ETurnErrorsAsSentences: the reasons a stored turn gives for what
// went wrong — a call that could not run, a turn that failed — are the
// server's words, some as Go writes them; the page shows them as it shows
// any server error, as sentences.
func TestE2ETurnErrorsAsSentences(t *testing.T) {
	e2e.NeedChromium(t)
	fake := fakeupstream.New()
	t.Cleanup(fake.Close)
	s := e2eServer(t, map[string]string{"MODEL_PROVIDER": "anthropic", "MODEL_BASE_URL": fake.URL(), "MODEL_NAME": "fake-model"})
	tid, token := apiThread(t, s, "Errors", "Refusals")

	// The editor refuses a path outside the session's mounts with the
	// contract's message, which ends without a full stop.
	fake.Push(steps(call(msgwire.SubToolTextEditor, map[string]any{"command": "view", "path": "/etc/passwd"})), textStep("Refused."))
	r := s.do("POST", appAPI+"/thread/"+tid+"/messages", token, map[string]any{"content": "show /etc/passwd", "pgpt": map[string]any{"tools": []any{"code_execution"}}})
	if r.status != 200 || !strings.Contains(string(r.body), "does not match any session mount") {
		t.Fatalf("the refused call's turn: %d %s", r.status, r.body)
	}
	// The upstream refuses the next turn in its own words.
	fake.Push(fakeupstream.Reply{Status: 400, ErrorMessage: "prompt is too long"})
	if r := s.do("POST", appAPI+"/thread/"+tid+"/messages", token, map[string]any{"content": "again"}); r.status != 400 {
		t.Fatalf("the failing turn: %d %s", r.status, r.body)
	}

	b := e2e.Start(t, 1440, 900)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	b.WaitTrue("the failed turn", `document.querySelectorAll('.msg.assistant > .turn-error').length > 0`, 10*time.Second)
	if got := e2e.Eval[string](b, "the call", `document.querySelector('.msg.assistant .turn-error').textContent`); got != "Could not run (invalid_tool_input): Path '/etc/passwd' does not match any session mount." {
		t.Errorf("the refused call shows %q", got)
	}
	if got := e2e.Eval[string](b, "the turn", `[...document.querySelectorAll('.msg.assistant > .turn-error')].pop().textContent`); got != "This turn failed: Prompt is too long." {
		t.Errorf("the failed turn shows %q", got)
	}
}

// hostileWord is a word too long for any line of the page.
var hostileWord = strings.Repeat("Antidisestablishmentarianism", 4)

// noSidewaysScroll fails for each element matching selector that scrolls
// sideways: its content is wider than it is (a long word not broken).
// Elements meant to scroll (code, tables) scroll inside themselves and do
// not widen what holds them.
func noSidewaysScroll(t *testing.T, b *e2e.Browser, what, selector string) {
	t.Helper()
	bad := e2e.Eval[[]string](b, what, fmt.Sprintf(`[...document.querySelectorAll(%q)].filter((e) => e.scrollWidth > e.clientWidth + 1)
		.map((e) => {
			const r = e.getBoundingClientRect();
			const wide = [...e.querySelectorAll('*')].filter((c) => c.getBoundingClientRect().right > r.right + 1).slice(0, 3)
				.map((c) => c.tagName + '.' + c.className + ' ' + Math.round(c.getBoundingClientRect().width) + ' px');
			return e.tagName + '.' + e.className + ': ' + e.scrollWidth + ' px of content in ' + e.clientWidth + ' (' + wide.join('; ') + ')';
		})`, selector))
	for _, s := range bad {
		t.Errorf("%s scrolls sideways: %s", what, s)
	}
}

// TestE2EHostileContent: names, titles and messages that hold markup,
// javascript: links or words longer than a line. Markup shows as the text
// it is and never runs, no link leaves for a script URL, and at 375 px
// nothing is pushed sideways: the thread, its files, the sidebar and its
// search, and the dialogs that name a project.
func TestE2EHostileContent(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	project := `<img src=x onerror="window.pwned='project'">` + hostileWord
	title := `<script>window.pwned='title'</script>` + hostileWord
	file := `<svg onload="window.pwned='file'">` + hostileWord + `.txt`
	pr := s.do("POST", appAPI+"/project", token, map[string]any{"name": project})
	if pr.status != 201 {
		t.Fatalf("project: %d %s", pr.status, pr.body)
	}
	pid := pr.json(t)["id"]
	th := s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": pid, "title": title})
	if th.status != 201 {
		t.Fatalf("thread: %d %s", th.status, th.body)
	}
	tid := th.json(t)["id"].(string)
	if r := s.do("PUT", appAPI+"/thread/"+tid+"/put-file/"+url.PathEscape(file), token, []byte("<script>window.pwned='text'</script>\n"), "Content-Type", "application/octet-stream"); r.status != 200 {
		t.Fatalf("put %s: %d %s", file, r.status, r.body)
	}
	msg := "[a](javascript:alert(1)) [b](JavaScript:alert(1)) [c](java\tscript:alert(1)) [d](data:text/html,<script>alert(1)</script>) " +
		"[e](vbscript:msgbox) <javascript:alert(1)> [f][r] [ok](https://example.com/" + hostileWord + ")\n\n[r]: javascript:alert(1)\n\n" +
		hostileWord + " `" + hostileWord + "` **" + hostileWord + "**\n\n# " + hostileWord + "\n\n> " + hostileWord + "\n\n" +
		"<b onmouseover=\"window.pwned='md'\">bold?</b>\n"
	if r := s.do("POST", appAPI+"/thread/"+tid+"/messages", token, map[string]any{"content": msg}); r.status != 200 {
		t.Fatalf("turn: %d %s", r.status, r.body)
	}

	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.SetViewport(375, 812)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	b.WaitTrue("the answer", `document.querySelectorAll('.msg').length === 2`, 20*time.Second)
	b.WaitTrue("the file", `!!document.querySelector('.file-list .file-name')`, 10*time.Second)
	if got := e2e.Eval[string](b, "title", `document.getElementById('thread-title').textContent`); got != title {
		t.Errorf("the thread's title shows as %q", got)
	}
	if got := e2e.Eval[string](b, "file name", `document.querySelector('.file-list .file-name').textContent`); got != file {
		t.Errorf("the file's name shows as %q", got)
	}
	links := e2e.Eval[[]string](b, "links", `[...document.querySelectorAll('.msg a[href]')].map((a) => a.getAttribute('href'))`)
	for _, l := range links {
		if !strings.HasPrefix(l, "https://") {
			t.Errorf("a link of the message leads to %q", l)
		}
	}
	if len(links) != 1 {
		t.Errorf("links of the message: %q, want the https one alone", links)
	}
	b.Do("preview the file", chromedp.Click(chromedp.CSS(".file-list .preview-toggle")))
	b.WaitText(".file-list .file-preview pre", "<script>", 10*time.Second)
	// The same name attached again: its chip says it was kept under
	// another name, and the message sent names the file.
	local := filepath.Join(t.TempDir(), file)
	if err := os.WriteFile(local, []byte("again\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.Do("attach the file", chromedp.SetUploadFiles(chromedp.ID("file-input"), []string{local}))
	b.WaitTrue("the chip", `!!document.querySelector('.attachment.done .renamed')`, 20*time.Second)
	noSidewaysScroll(t, b, "the composer at 375 px", ".composer, .attachments, .attachment")
	// The taller composer stays inside the conversation: the panel after
	// it does not cover it.
	covered := e2e.Eval[string](b, "the composer's buttons", `(() => {
		const out = [];
		for (const id of ['send', 'file-input']) {
			const el = document.getElementById(id);
			const at = el.labels && el.labels.length ? el.labels[0] : el;
			at.scrollIntoView({ block: 'center' });
			const r = at.getBoundingClientRect();
			const top = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
			if (!at.contains(top)) out.push(id + ' under ' + (top ? top.tagName + '.' + top.className : 'nothing'));
		}
		const conv = document.querySelector('.conversation').getBoundingClientRect();
		const side = document.querySelector('.side').getBoundingClientRect();
		if (conv.bottom > side.top + 1 && side.top > conv.top) out.push('the conversation ends at ' + Math.round(conv.bottom) + ', the panel starts at ' + Math.round(side.top));
		return out.join(', ');
	})()`)
	if covered != "" {
		t.Errorf("the composer at 375 px with a tall attachment: %s", covered)
	}
	b.Do("send", chromedp.SetValue(chromedp.ID("message"), "Read it"), chromedp.Click(chromedp.ID("send")))
	b.WaitTrue("the second answer", `document.querySelectorAll('.msg').length === 4 && !document.querySelector('[aria-busy]')`, 30*time.Second)
	if got := e2e.Eval[string](b, "attached", `document.querySelector('.msg.user:nth-last-child(2) .attached-file').textContent`); !strings.HasPrefix(got, "Attached file: /mnt/user-data/uploads/<svg") {
		t.Errorf("the message names its file as %q", got)
	}
	noSidewaysScroll(t, b, "the thread at 375 px", ".log-region, .msg, .side > section, .file-list > li, .thread-head, .conversation")
	noHorizontalOverflow(t, b, 375)
	shoot(t, b, "thread-375")

	// The sidebar: the project, its thread, and the search finding it.
	b.Do("open the sidebar", chromedp.Click(chromedp.ID("menu")), chromedp.WaitVisible(chromedp.CSS(`.project .project-name`)))
	b.Do("open the project", chromedp.Evaluate[chromedp.Void](`(() => { const p = document.querySelector('.project .project-name'); if (p.getAttribute('aria-expanded') !== 'true') p.click(); })()`),
		chromedp.WaitVisible(chromedp.CSS(`.threads a`)))
	if got := e2e.Eval[string](b, "names", `document.querySelector('.project-name').title + '|' + document.querySelector('.threads a').textContent`); got != project+"|"+title {
		t.Errorf("the sidebar shows %q", got)
	}
	b.Do("search", chromedp.SendKeys(chromedp.ID("thread-search"), "Antidisestablishment"))
	b.WaitTrue("a result", `!!document.querySelector('.search-results a')`, 10*time.Second)
	noSidewaysScroll(t, b, "the sidebar at 375 px", ".sidebar, .project, .threads, .search-results, .search-results a")
	noHorizontalOverflow(t, b, 375)
	shoot(t, b, "sidebar-375")

	// The dialogs that name the project.
	for _, button := range []string{".project .new-thread", ".project .project-actions .danger"} {
		b.Do("open the dialog of "+button, chromedp.Click(chromedp.CSS(button)), chromedp.WaitVisible(chromedp.ID("dialog-ok")))
		noSidewaysScroll(t, b, "the dialog of "+button, "#dialog, #dialog form, #dialog h2, #dialog p")
		b.Do("cancel", chromedp.Click(chromedp.ID("dialog-cancel")), chromedp.WaitNotVisible(chromedp.ID("dialog-ok")))
	}
	if got := e2e.Eval[string](b, "scripts run", `String(window.pwned)`); got != "undefined" {
		t.Errorf("markup in a name or a message ran: %s", got)
	}
}

// TestE2ELivePreviewTicketWhenShown: a live preview's frame asks for its
// one-minute ticket when it comes into view, not when its card is drawn:
// a card far up a thread, framed lazily from a ticket asked for at once,
// found it expired when the reader scrolled up to it a minute later.
func TestE2ELivePreviewTicketWhenShown(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, token := apiThread(t, s, "Previews", "Far up")
	fileURL := map[string]string{}
	for _, name := range []string{"far", "near"} {
		page := `<!doctype html><p>hi</p><script>parent.postMessage('` + name + `', '*')</script>`
		if r := s.do("PUT", appAPI+"/thread/"+tid+"/put-file/"+name+".html", token, []byte(page), "Content-Type", "application/octet-stream"); r.status != 200 {
			t.Fatalf("put %s.html: %d %s", name, r.status, r.body)
		}
		fileURL[name] = appAPI + "/thread/" + tid + "/download-file?path=" + url.QueryEscape("/mnt/user-data/uploads/"+name+".html")
	}
	b := e2e.Start(t, 1440, 900)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	// The page's own cards: the far one drawn first, below a tall block
	// (as a card of an earlier turn lies out of view), then one in view.
	b.Do("draw the cards", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`import('/ui/artifacts.js').then((m) => {
		window.frameSaid = [];
		addEventListener('message', (e) => window.frameSaid.push(e.data));
		const far = m.resourceCard({ name: 'far.html', mime_type: 'text/html', download_url: %q });
		const near = m.resourceCard({ name: 'near.html', mime_type: 'text/html', download_url: %q });
		const spacer = document.createElement('div');
		const box = document.createElement('div');
		box.id = 'cards';
		box.append(near, spacer, far);
		document.getElementById('main').prepend(box);
		spacer.style.height = '5000px'; // through the CSSOM: the page's CSP refuses style attributes
	})`, fileURL["far"], fileURL["near"]), chromedp.EvalAwaitPromise))
	// The card in view is framed; by then the far one would have its
	// ticket too, had it asked for it when it was drawn, before the other.
	b.WaitTrue("the near preview's script", `window.frameSaid.includes('near')`, 15*time.Second)
	far := `document.querySelector('.artifact[data-name="far.html"] iframe')`
	if got := e2e.Eval[string](b, "the far frame's address", far+`.getAttribute('src') || ''`); got != "" {
		t.Errorf("the frame out of view already has its ticket: %s", got)
	}
	b.Do("scroll to the far card", chromedp.Evaluate[chromedp.Void](far+`.scrollIntoView()`))
	b.WaitTrue("the far preview's script", `window.frameSaid.includes('far')`, 15*time.Second)
	if got := e2e.Eval[string](b, "the frame", `(() => { const f = `+far+`; return f.getAttribute('sandbox') + ' ' + new URL(f.src).searchParams.get('disposition'); })()`); got != "allow-scripts preview" {
		t.Errorf("the frame: %q", got)
	}
}

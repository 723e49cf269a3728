package main

import (
	"context"
	"encoding/json"
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

// emulateScheme makes the system's colour setting light or dark.
func emulateScheme(t *testing.T, b *e2e.Browser, scheme string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
	defer cancel()
	_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
	if err != nil {
		t.Fatalf("system colour scheme %s: %v", scheme, err)
	}
}

// grantClipboard lets the page of base read and write the clipboard.
func grantClipboard(t *testing.T, b *e2e.Browser, base string) {
	t.Helper()
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		ctx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
		_, err := chromedp.CallBrowser(ctx, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: name}, Setting: browser.PermissionSettingGranted, Origin: base})
		cancel()
		if err != nil {
			t.Fatalf("grant %s: %v", name, err)
		}
	}
}

// contrastJS computes the WCAG contrast ratio between an element's text
// colour and the background it is drawn on (its own, else the nearest
// ancestor's that is not transparent).
const contrastJS = `((sel) => {
	const el = document.querySelector(sel);
	if (!el) return -1;
	const parse = (c) => { const p = c.match(/[\d.]+/g).map(Number); return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 }; };
	const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }; return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
	let bg = { r: 255, g: 255, b: 255, a: 1 };
	for (let e = el; e; e = e.parentElement) { const c = parse(getComputedStyle(e).backgroundColor); if (c.a > 0) { bg = c; break; } }
	const [hi, lo] = [lum(parse(getComputedStyle(el).color)), lum(bg)].sort((a, b) => b - a);
	return (hi + 0.05) / (lo + 0.05);
})`

// readable fails for a field whose typed text does not contrast with its
// background (WCAG AA: 4.5:1).
func readable(t *testing.T, b *e2e.Browser, theme, selector string) {
	t.Helper()
	ratio := e2e.Eval[float64](b, "contrast of "+selector, fmt.Sprintf(`%s(%q)`, contrastJS, selector))
	if ratio < 4.5 {
		colours := e2e.Eval[string](b, "colours", fmt.Sprintf(`(() => { const s = getComputedStyle(document.querySelector(%q)); return s.color + ' on ' + s.backgroundColor; })()`, selector))
		t.Errorf("%s theme: text typed in %s has a contrast of %.2f:1 (%s)", theme, selector, ratio, colours)
	}
}

// themeIs waits until the page shows the theme.
func themeIs(b *e2e.Browser, theme string) {
	b.WaitTrue("the "+theme+" theme", fmt.Sprintf(`document.documentElement.dataset.theme === %q`, theme), 5*time.Second)
}

// TestE2EFieldsReadableInBothThemes: text typed into every field (sign-in,
// New project, search, the dialog, the message box) contrasts with the
// field in the light and the dark theme, whether the system's setting or
// the page's theme menu chose it; the menu's choice outlives a reload and
// "System" follows the system again. A signed-out load asks for a session
// without a failed request in the console.
func TestE2EFieldsReadableInBothThemes(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, _ := apiThread(t, s, "Colours", "Contrast")
	b := e2e.Start(t, 1440, 1000)

	// Signed out: the sign-in form, and no failed request logged.
	b.Do("open the sign-in page", chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.ID("email")))
	b.Do("a console barrier", chromedp.Evaluate[chromedp.Void](`console.info('signed-out page drawn')`))
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(strings.Join(b.Console(), "\n"), "signed-out page drawn") {
		if time.Now().After(deadline) {
			t.Fatal("the console message never arrived")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, m := range b.Console() {
		if strings.Contains(m, "401") || strings.Contains(strings.ToLower(m), "failed to load") {
			t.Errorf("a signed-out load logs an error: %s", m)
		}
	}

	for _, scheme := range []string{"light", "dark"} {
		emulateScheme(t, b, scheme)
		b.Do("open the sign-in page", chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.ID("email")))
		themeIs(b, scheme)
		b.Do("type into the sign-in form", chromedp.SendKeys(chromedp.ID("email"), e2eEmail), chromedp.SendKeys(chromedp.ID("password"), e2ePassword))
		readable(t, b, scheme, "#email")
		readable(t, b, scheme, "#password")
		b.Do("sign in", chromedp.Click(chromedp.ID("login")), chromedp.WaitVisible(chromedp.ID("new-project")))
		b.Do("type a project's name and a search", chromedp.SendKeys(chromedp.ID("new-project"), "Typed"), chromedp.SendKeys(chromedp.ID("thread-search"), "zzz"))
		readable(t, b, scheme, "#new-project")
		readable(t, b, scheme, "#thread-search")
		b.Do("open the dialog", chromedp.Click(chromedp.CSS(".project-name")), chromedp.WaitVisible(chromedp.CSS(".project .new-thread")),
			chromedp.Click(chromedp.CSS(".project .new-thread")), chromedp.WaitVisible(chromedp.ID("dialog-input")))
		readable(t, b, scheme, "#dialog-input")
		b.Do("cancel the dialog", chromedp.Click(chromedp.ID("dialog-cancel")))
		b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")),
			chromedp.SendKeys(chromedp.ID("message"), "typed text"))
		readable(t, b, scheme, "#message")
		readable(t, b, scheme, "#theme")
		b.Do("sign out", chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("email")))
	}

	// The theme menu overrides the system's setting, for good.
	emulateScheme(t, b, "light")
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	themeIs(b, "light")
	b.Do("choose the dark theme", chromedp.SetValue(chromedp.ID("theme"), "dark"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('theme').dispatchEvent(new Event('change'))`))
	themeIs(b, "dark")
	b.Do("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("new-project")))
	themeIs(b, "dark")
	if got := e2e.Eval[string](b, "the menu", `document.getElementById('theme').value`); got != "dark" {
		t.Errorf("after a reload the theme menu shows %q", got)
	}
	b.Do("type a project's name", chromedp.SendKeys(chromedp.ID("new-project"), "Typed"))
	readable(t, b, "chosen dark", "#new-project")
	b.Do("choose the system's theme", chromedp.SetValue(chromedp.ID("theme"), "system"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('theme').dispatchEvent(new Event('change'))`))
	themeIs(b, "light")
	emulateScheme(t, b, "dark")
	themeIs(b, "dark")
	if n := e2e.Eval[int](b, "storage", `localStorage.length`); n != 0 {
		t.Errorf("the system's theme leaves %d keys in localStorage", n)
	}
	everyControlLabelled(t, b, "home page")
}

// TestE2EConversationLayout, at 1440 and 375 px: the thread opens at its
// end with the message box in view at the bottom, and a new turn stays in
// view as it arrives; Enter in the empty box sends nothing and asks
// nothing; the first Tab stop is a skip link to the message box, and the
// skip links move the focus without leaving the page; Shift+Escape
// focuses the message box and Ctrl+Shift+O starts a new thread; on a
// phone one press brings the thread's files into view. The welcome page
// says what to do next as projects come.
func TestE2EConversationLayout(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)

	// The welcome page follows the projects.
	b.WaitText(".home .home-next", "Create a project", 5*time.Second)
	b.Do("create a project", chromedp.SendKeys(chromedp.ID("new-project"), "Layout"), chromedp.Click(chromedp.CSS(".new-project button[type=submit]")))
	b.WaitText(".home .home-next", "New thread", 10*time.Second)

	pid := s.do("GET", appAPI+"/project", token, nil).json(t)["data"].([]any)[0].(map[string]any)["id"]
	tid := s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": pid, "title": "Long thread"}).json(t)["id"].(string)
	for i := range 8 {
		if r := s.do("POST", appAPI+"/thread/"+tid+"/messages", token, map[string]any{"content": fmt.Sprintf("question %d", i+1)}); r.status != 200 {
			t.Fatalf("turn %d: %d %s", i+1, r.status, r.body)
		}
	}
	composerInView := `(() => { const s = document.getElementById('send').getBoundingClientRect(); const m = document.getElementById('message').getBoundingClientRect();
		return s.bottom <= innerHeight && s.top >= 0 && m.top >= 0 && m.bottom <= innerHeight; })()`
	lastInView := `(() => { const log = document.querySelector('[role=log]').getBoundingClientRect(); const last = [...document.querySelectorAll('.messages > .msg')].pop().getBoundingClientRect();
		return last.bottom <= Math.min(log.bottom, innerHeight) + 2 && last.bottom > Math.max(log.top, 0); })()`

	for _, size := range []struct{ w, h int }{{1440, 1000}, {375, 812}} {
		b.SetViewport(size.w, size.h)
		b.Do("open the thread", chromedp.Navigate(s.base+"/#/"), chromedp.WaitVisible(chromedp.CSS(".home")),
			chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
		b.WaitTrue("the history", `document.querySelectorAll('.messages > .msg').length >= 16`, 10*time.Second)
		b.WaitTrue(fmt.Sprintf("at %d px the message box in view", size.w), composerInView, 5*time.Second)
		b.WaitTrue(fmt.Sprintf("at %d px the last message in view", size.w), lastInView, 5*time.Second)
		if size.w == 375 {
			noHorizontalOverflow(t, b, 375)
		}
		// Reading back up: the message box stays where it is, and a button
		// leads back to the end.
		b.Do("scroll back to the first message", chromedp.Evaluate[chromedp.Void](`document.querySelector('[role=log]').scrollTop = 0; window.scrollTo(0, 0)`))
		b.WaitTrue(fmt.Sprintf("at %d px the message box in view at the top of the thread", size.w), composerInView+` && document.querySelector('.messages > .msg').getBoundingClientRect().top >= 0`, 5*time.Second)
		b.WaitTrue("the way back to the end", `!document.querySelector('.jump-latest').hidden`, 5*time.Second)
		b.Do("back to the end", chromedp.Click(chromedp.CSS(".jump-latest")))
		b.WaitTrue(fmt.Sprintf("at %d px the last message in view again", size.w), lastInView+` && document.querySelector('.jump-latest').hidden`, 5*time.Second)

		// Enter in the empty box: nothing sent, no validation bubble.
		n := e2e.Eval[int](b, "messages", `document.querySelectorAll('.messages > .msg').length`)
		b.Do("Enter in the empty box", chromedp.Evaluate[chromedp.Void](`window.invalids = 0; document.querySelector('form.composer').addEventListener('invalid', () => window.invalids++, true)`),
			chromedp.Focus(chromedp.ID("message")), chromedp.KeyEvent(kb.Enter))
		if got := e2e.Eval[string](b, "after Enter", `window.invalids + ' ' + document.querySelectorAll('.messages > .msg').length`); got != fmt.Sprintf("0 %d", n) {
			t.Errorf("at %d px Enter in the empty box: %s invalid events and messages (want 0 %d)", size.w, got, n)
		}

		// A new turn: it stays in view while it arrives, and after.
		b.Do("send a message", chromedp.Focus(chromedp.ID("message")), chromedp.KeyEvent(fmt.Sprintf("one more at %d\r", size.w)))
		b.WaitTrue("the answer", fmt.Sprintf(`document.querySelectorAll('.messages > .msg').length === %d && !document.querySelector('[aria-busy]')`, n+2), 30*time.Second)
		b.WaitTrue(fmt.Sprintf("at %d px the new answer in view", size.w), lastInView, 5*time.Second)
		b.WaitTrue(fmt.Sprintf("at %d px the message box still in view", size.w), composerInView, 5*time.Second)
	}

	// On a phone, the files are one press away.
	b.Do("go to the files", chromedp.Click(chromedp.CSS(".thread-head .files-jump")))
	b.WaitTrue("the files in view", `(() => { const r = document.getElementById('files-h').getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight && document.activeElement.id === 'files-h'; })()`, 5*time.Second)
	b.SetViewport(1440, 1000)

	// Keyboard: the first Tab stop leads to the message box; the skip
	// links keep the page's route.
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	first := e2e.Eval[string](b, "first tab stop", `[...document.querySelectorAll('a[href], button, input, select, textarea, [tabindex]')]
		.filter(el => el.tabIndex >= 0 && !el.disabled && !el.closest('[hidden], dialog:not([open])'))[0].id`)
	if first != "skip-message" {
		t.Errorf("the first Tab stop is %q, want the skip link to the message box", first)
	}
	hash := e2e.Eval[string](b, "hash", `location.hash`)
	b.Do("skip to the message box", chromedp.Focus(chromedp.ID("skip-message")), chromedp.KeyEvent(kb.Enter))
	if got := e2e.Eval[string](b, "focus", `document.activeElement.id + ' ' + location.hash`); got != "message "+hash {
		t.Errorf("after the skip link: focus and route %q, want %q", got, "message "+hash)
	}
	b.Do("skip to the main content", chromedp.Focus(chromedp.ID("skip-main")), chromedp.KeyEvent(kb.Enter))
	if got := e2e.Eval[string](b, "focus", `document.activeElement.id + ' ' + location.hash + ' ' + !!document.getElementById('thread-title')`); got != "main "+hash+" true" {
		t.Errorf("after the skip link to the main content: %q", got)
	}

	// Shortcuts.
	b.Do("focus the search", chromedp.Focus(chromedp.ID("thread-search")), chromedp.KeyEvent(kb.Escape, chromedp.KeyModifiers(chromedp.ModifierShift)))
	if got := e2e.Eval[string](b, "focus", `document.activeElement.id`); got != "message" {
		t.Errorf("Shift+Escape focused %q, want the message box", got)
	}
	b.Do("Ctrl+Shift+O", chromedp.KeyEvent("O", chromedp.KeyModifiers(chromedp.ModifierCtrl, chromedp.ModifierShift)))
	b.WaitText("#dialog-title", "New thread in Layout", 5*time.Second)
	b.Do("name it", chromedp.SetValue(chromedp.ID("dialog-input"), "By shortcut"), chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitText("#thread-title", "By shortcut", 10*time.Second)
	everyControlLabelled(t, b, "thread page")
}

// TestE2EMessageHabits: a message renders as Markdown that flows (no
// pre-wrap gaps in tables and lists) with a task list's boxes; the
// thread's automatic title is its first line as plain text; a message
// copies whole; the thread exports as Markdown and as JSON.
func TestE2EMessageHabits(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	pid := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Habits"}).json(t)["id"]
	th := s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": pid})
	if th.status != 201 || th.json(t)["title"] != "New thread" {
		t.Fatalf("thread: %d %s", th.status, th.body)
	}
	tid := th.json(t)["id"].(string)
	b := e2e.Start(t, 1440, 1000)
	grantClipboard(t, b, s.base)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	const msg = "## Sales check\n\n| region | total |\n|---|---|\n| North | 40 |\n| South | 21 |\n\n- [x] load the data\n- [ ] plot it\n\nSome **bold** words."
	b.Do("send", chromedp.SetValue(chromedp.ID("message"), msg), chromedp.Click(chromedp.ID("send")))
	b.WaitTrue("the answer", `document.querySelectorAll('.msg').length === 2 && !document.querySelector('[aria-busy]')`, 30*time.Second)

	// The title: plain text, in the page and the sidebar.
	b.WaitText("#thread-title", "Sales check", 10*time.Second)
	b.WaitText(fmt.Sprintf(`.threads a[data-thread-id=%q]`, tid), "Sales check", 10*time.Second)
	if got := e2e.Eval[string](b, "titles", fmt.Sprintf(`document.getElementById('thread-title').textContent + '|' + document.querySelector('.threads a[data-thread-id=%q]').textContent`, tid)); got != "Sales check|Sales check" {
		t.Errorf("the automatic title: %q", got)
	}

	// Markdown flows; code alone keeps its spaces.
	md := `.msg.user .text.md`
	if got := e2e.Eval[string](b, "white-space", `(() => { const m = document.querySelector('`+md+`'); return [m, m.querySelector('table'), m.querySelector('td'), m.querySelector('li')].map(e => getComputedStyle(e).whiteSpace).join(' '); })()`); got != "normal normal normal normal" {
		t.Errorf("white-space of the message, its table, cell and list item: %q", got)
	}
	// A table row is one line high (pre-wrap drew blank lines between rows).
	if got := e2e.Eval[bool](b, "table rows", `(() => { const rows = [...document.querySelectorAll('`+md+` tr')]; const line = parseFloat(getComputedStyle(rows[0]).lineHeight) || 20; return rows.every(r => r.getBoundingClientRect().height < 2.2 * line); })()`); !got {
		t.Error("the table's rows are taller than one line of text")
	}
	if got := e2e.Eval[string](b, "task list", `[...document.querySelectorAll('`+md+` li input[type=checkbox]')].map(c => c.checked + ':' + c.disabled + ':' + c.getAttribute('aria-label')).join(' ')`); got != "true:true:Done false:true:Not done" {
		t.Errorf("the task list's boxes: %q", got)
	}

	// Copy the whole message.
	b.Do("copy the message", chromedp.Click(chromedp.CSS(`.msg.user .msg-tools button.copy`)))
	b.WaitText(".msg.user .msg-tools .copy-status", "Copied", 5*time.Second)
	if got := e2e.Eval[string](b, "clipboard", `navigator.clipboard.readText()`); got != msg {
		t.Errorf("the clipboard holds %q, want the message", got)
	}

	// Export: Markdown and JSON.
	b.Do("export as Markdown", chromedp.Click(chromedp.CSS(".thread-head details.export summary")), chromedp.Click(chromedp.ID("export-md")))
	exported := string(b.WaitDownload("Sales-check.md", 10*time.Second))
	for _, want := range []string{"# Sales check\n", "## You · ", "| North | 40 |", "- [x] load the data", "## Assistant · ", "offline runner model"} {
		if !strings.Contains(exported, want) {
			t.Errorf("the Markdown export lacks %q:\n%s", want, exported)
		}
	}
	b.Do("export as JSON", chromedp.Click(chromedp.CSS(".thread-head details.export summary")), chromedp.Click(chromedp.ID("export-json")))
	var doc struct {
		Thread   map[string]any   `json:"thread"`
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(b.WaitDownload("Sales-check.json", 10*time.Second), &doc); err != nil {
		t.Fatalf("the JSON export: %v", err)
	}
	if doc.Thread["id"] != tid || len(doc.Messages) != 2 || doc.Messages[0]["role"] != "user" {
		t.Errorf("the JSON export: thread %v, %d messages", doc.Thread["id"], len(doc.Messages))
	}
	everyControlLabelled(t, b, "thread with a task list")
}

// TestE2EExportKeepsReasonsVerbatim: the Markdown export shows a failed
// turn's reason, a call's reason for not running and a file's name and
// path as the text they are: a reason holding Markdown or HTML adds no
// heading, link or HTML to the document (marked, the page's own parser,
// reads the export back) and comes back whole from a code span or block.
// A thread's title, the document's heading, stays one heading of its text.
func TestE2EExportKeepsReasonsVerbatim(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	b := e2e.Start(t, 1024, 768)
	b.Do("open the page", chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.ID("email")))
	for _, reason := range []string{
		"# Not a heading",
		"upstream said:\n# Not a heading\n\n## Nor this",
		"```\nfenced\n```\n\n# after the fence",
		"<script>alert(1)</script>",
		"see [this](javascript:alert(1))",
		"<img src=x onerror=alert(1)>",
		"a `tick` and ``two``",
		"`starts and ends with a tick`",
		"plain words",
	} {
		t.Run(reason, func(t *testing.T) {
			arg, _ := json.Marshal(reason)
			got := e2e.Eval[string](b, "the export read back", `Promise.all([import('/ui/chat.js'), import('/ui/vendor/marked.js')]).then(([chat, { marked }]) => {
				const reason = `+string(arg)+`;
				const md = chat.threadMarkdown({ title: reason }, [{ role: 'assistant', created_at: 'then', status: 'failed', end_detail: reason, content: [
					{ type: 'bash_code_execution_tool_result', content: { error_code: reason } },
					{ type: 'zylon-resource', resource: { name: reason, path: reason } },
				] }]);
				const found = { headings: [], other: [], verbatim: 0 };
				const walk = (tokens) => { for (const tk of tokens || []) {
					if (tk.type === 'heading') found.headings.push(tk.depth === 1 && tk.tokens.map((x) => x.text).join('') === reason.replace(/\s+/g, ' ').trim() ? 'the title' : tk.text);
					if (tk.type === 'html' || tk.type === 'link' || tk.type === 'image') found.other.push(tk.type + ' ' + tk.raw);
					if ((tk.type === 'code' || tk.type === 'codespan') && (tk.text === reason || tk.text === reason.replace(/\n/g, ' '))) found.verbatim++;
					walk(tk.tokens);
				} };
				walk(marked.lexer(md));
				return JSON.stringify(found);
			})`)
			if want := `{"headings":["the title","Assistant · then"],"other":[],"verbatim":4}`; got != want {
				t.Errorf("the export read back: %s, want %s", got, want)
			}
		})
	}
}

// TestE2EExportMenuCloses: the thread's Export menu closes as menus do,
// with Escape (the focus back on Export) and with a click elsewhere; it
// stayed open over the Delete button until Export was pressed again.
func TestE2EExportMenuCloses(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, _ := apiThread(t, s, "Menus", "Export")
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.SetViewport(375, 812)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	menu := `document.querySelector('.thread-head details.export')`
	b.Do("open the menu from the keyboard", chromedp.Focus(chromedp.CSS(".thread-head details.export summary")), chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.ID("export-md")), chromedp.KeyEvent("\t"))
	b.Do("press Escape", chromedp.KeyEvent(kb.Escape))
	b.WaitTrue("the menu closed, the focus on Export", `!`+menu+`.open && document.activeElement === `+menu+`.querySelector('summary')`, 5*time.Second)
	b.Do("open the menu", chromedp.Click(chromedp.CSS(".thread-head details.export summary")), chromedp.WaitVisible(chromedp.ID("export-md")))
	b.Do("click elsewhere", chromedp.Click(chromedp.ID("thread-title")))
	b.WaitTrue("the menu closed", `!`+menu+`.open`, 5*time.Second)
}

// TestE2EAttachHabits: an upload of a name already in the thread keeps
// both files (the new one numbered, and the page says so); each file shows
// once in the composer, as a chip; files pasted into the message box or
// dropped anywhere on the page are attached, an image with a thumbnail;
// the attachments of a message being edited can be taken off.
func TestE2EAttachHabits(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, token := apiThread(t, s, "Attach", "Uploads")
	dir := t.TempDir()
	first, second := filepath.Join(dir, "a", "sales.csv"), filepath.Join(dir, "b", "sales.csv")
	for path, body := range map[string]string{first: "first\n", second: "second\n"} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	download := func(name string) string {
		r := s.do("GET", appAPI+"/thread/"+tid+"/download-file?path=/mnt/user-data/uploads/"+name, token, nil)
		if r.status != 200 {
			return fmt.Sprintf("%d", r.status)
		}
		return string(r.body)
	}

	b.Do("pick sales.csv", chromedp.SetUploadFiles(chromedp.ID("file-input"), []string{first}))
	b.WaitText(`.upload.done[data-name="sales.csv"]`, "Uploaded to /mnt/user-data/uploads/sales.csv", 20*time.Second)
	if n := e2e.Eval[int](b, "shown", `[...document.querySelectorAll('form.composer li')].filter(li => li.textContent.includes('sales.csv')).length`); n != 1 {
		t.Errorf("sales.csv is shown %d times in the composer", n)
	}
	b.Do("pick another sales.csv", chromedp.SetUploadFiles(chromedp.ID("file-input"), []string{second}))
	note := b.WaitText(`.upload.done[data-name="sales-2.csv"]`, "Uploaded to /mnt/user-data/uploads/sales-2.csv", 20*time.Second)
	if !strings.Contains(note, "a file named sales.csv is already in this thread") {
		t.Errorf("the renamed upload says %q", note)
	}
	if x, y := download("sales.csv"), download("sales-2.csv"); x != "first\n" || y != "second\n" {
		t.Errorf("after two uploads of sales.csv the thread holds %q and %q", x, y)
	}

	// Paste an image into the message box, drop a file on the thread's title.
	b.Do("paste and drop", chromedp.Evaluate[chromedp.Void](`(async () => {
		const c = document.createElement('canvas'); c.width = 8; c.height = 8;
		const g = c.getContext('2d'); g.fillStyle = '#c00'; g.fillRect(0, 0, 8, 8);
		const png = await new Promise((r) => c.toBlob(r, 'image/png'));
		const paste = new DataTransfer();
		paste.items.add(new File([png], 'image.png', { type: 'image/png' }));
		document.getElementById('message').dispatchEvent(new ClipboardEvent('paste', { clipboardData: paste, bubbles: true, cancelable: true }));
		const drop = new DataTransfer();
		drop.items.add(new File(['dropped\n'], 'dropped.txt', { type: 'text/plain' }));
		const title = document.getElementById('thread-title');
		title.dispatchEvent(new DragEvent('dragover', { dataTransfer: drop, bubbles: true, cancelable: true }));
		title.dispatchEvent(new DragEvent('drop', { dataTransfer: drop, bubbles: true, cancelable: true }));
	})()`))
	b.WaitTrue("the pasted image's chip with its thumbnail", `(() => { const i = document.querySelector('.upload.done[data-name="image.png"] img.thumb'); return i && i.complete && i.naturalWidth === 8; })()`, 20*time.Second)
	b.WaitText(`.upload.done[data-name="dropped.txt"]`, "Uploaded to /mnt/user-data/uploads/dropped.txt", 20*time.Second)
	if got := download("dropped.txt"); got != "dropped\n" {
		t.Errorf("the dropped file: %q", got)
	}
	everyControlLabelled(t, b, "composer with chips")

	// Send with two attachments, then edit the message and take one off.
	b.Do("remove the image", chromedp.Click(chromedp.CSS(`.attachments button[aria-label="Remove image.png from the message"]`)),
		chromedp.Click(chromedp.CSS(`.attachments button[aria-label="Remove sales.csv from the message"]`)))
	b.WaitTrue("two chips", `document.querySelectorAll('form.composer .attachment').length === 2`, 5*time.Second)
	b.Do("send", chromedp.Focus(chromedp.ID("message")), chromedp.KeyEvent("Compare them\r"))
	b.WaitTrue("the answer", `document.querySelectorAll('.msg').length === 2 && !document.querySelector('[aria-busy]')`, 30*time.Second)
	b.Do("edit", chromedp.Click(chromedp.CSS("button.edit")), chromedp.WaitVisible(chromedp.ID("edit-message")))
	if got := e2e.Eval[string](b, "edit chips", `[...document.querySelectorAll('.edit-form .attachment .file-name')].map(e => e.textContent).join(' ')`); got != "sales-2.csv dropped.txt" {
		t.Errorf("the edited message's attachments: %q", got)
	}
	everyControlLabelled(t, b, "the edit form with attachments")
	b.Do("take one off and send", chromedp.Click(chromedp.CSS(`.edit-form button[aria-label="Remove sales-2.csv from the message"]`)),
		chromedp.Focus(chromedp.ID("edit-message")), chromedp.KeyEvent(kb.End), chromedp.KeyEvent(" again\r"))
	b.WaitTrue("the edited turn", `document.querySelectorAll('.messages:not(.replaced-list) > .msg').length === 2 && !document.querySelector('[aria-busy]') &&
		document.querySelector('.messages:not(.replaced-list) > .msg.user').textContent.includes('Compare them again')`, 30*time.Second)
	msgs := s.do("GET", appAPI+"/thread/"+tid+"/messages", token, nil).json(t)["data"].([]any)
	var last []string
	for _, m := range msgs {
		m := m.(map[string]any)
		if m["role"] != "user" || m["replaced"] == true {
			continue
		}
		last = last[:0]
		for _, c := range m["content"].([]any) {
			last = append(last, c.(map[string]any)["type"].(string))
		}
	}
	if got := strings.Join(last, " "); got != "container_upload text" {
		t.Errorf("the edited message as stored: %s", got)
	}
}

// TestE2ELiveRun: a running command's clock ticks before it prints
// anything, beside its time limit; its live output box follows the end of the output; its
// command is highlighted with a Copy button; a reload reattaches to the
// turn stamped with the turn's own start; Stop ends the turn as a stop,
// not a failure, before and after a reload; a finished card says how long
// its command ran, live and after a reload.
func TestE2ELiveRun(t *testing.T) {
	e2e.NeedChromium(t)
	agent := needDocker(t)
	s := e2eServer(t, map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": agent, "MODEL_PROVIDER": "runner"})
	tid, token := apiThread(t, s, "Live", "Clock")
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	open := func(what string) {
		b.Do(what, chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	}
	open("open the thread")

	// A quick command: the finished card says how long it ran.
	b.Do("send a quick command", chromedp.SetValue(chromedp.ID("message"), "```bash\necho hi\n```"), chromedp.Click(chromedp.ID("send")))
	b.WaitText(".msg.assistant .exec .exit-code", "Exit code: 0", 90*time.Second)
	b.WaitTrue("the finished card's duration", `/^exit code 0 · \d+(\.\d)? s$/.test(document.querySelector('.msg.assistant .exec .exec-status').textContent)`, 5*time.Second)
	if got := e2e.Eval[string](b, "command", `(() => { const c = document.querySelector('.msg.assistant .exec'); return c.querySelector('.command code').className + ' | ' + c.querySelector('.code-tools button.copy').getAttribute('aria-label'); })()`); !strings.Contains(got, "language-bash") || !strings.Contains(got, "hljs") || !strings.HasSuffix(got, "| Copy command") {
		t.Errorf("the command's highlighting and Copy: %q", got)
	}
	b.WaitTrue("the turn's end", `!document.querySelector('[aria-busy]') && !document.getElementById('send').disabled`, 30*time.Second)

	// A slow command, silent at first.
	b.Do("send a slow command", chromedp.SetValue(chromedp.ID("message"), "```bash\nsleep 4\nfor i in $(seq 1 80); do echo line$i; done\nsleep 25\n```"), chromedp.Click(chromedp.ID("send")))
	card := `document.querySelector('.msg.assistant:last-child .exec')`
	b.WaitTrue("the clock before any output", `(() => { const c = `+card+`; return c && !c.querySelector('pre.live') && /^running… [1-9]\d* s$/.test(c.querySelector('.exec-status').textContent); })()`, 60*time.Second)
	// The time limit is said before the command is cut by it.
	if got := e2e.Eval[string](b, "limit", card+`.querySelector('.exec-limit').textContent`); got != "time limit 60 s" {
		t.Errorf("the running card's time limit: %q", got)
	}
	b.WaitText(".msg.assistant:last-child .exec pre.live.stdout", "line80", 30*time.Second)
	b.WaitTrue("the running card and the message box in view", `(() => { const c = `+card+`.getBoundingClientRect(); const m = document.getElementById('message').getBoundingClientRect();
		return c.bottom <= innerHeight && c.bottom > 0 && m.bottom <= innerHeight; })()`, 5*time.Second)
	if got := e2e.Eval[string](b, "live box", `(() => { const p = `+card+`.querySelector('pre.live.stdout'); return p.scrollHeight > p.clientHeight ? String(p.scrollHeight - p.scrollTop - p.clientHeight <= 2) : 'no overflow'; })()`); got != "true" {
		t.Errorf("the live output box at the end of 80 lines: at its end %s", got)
	}
	shoot(t, b, "live-run-1440")

	// Reload: the reattached answer keeps its turn's time.
	b.Do("reload", chromedp.Reload())
	open("open the thread again")
	b.WaitText(".msg.assistant:last-child .exec pre.live.stdout", "line80", 20*time.Second)
	// The stored quick command keeps its duration (the server's timing).
	b.WaitTrue("the stored card's duration", `/^exit code 0 · \d+(\.\d)? s$/.test(document.querySelector('.msg.assistant .exec .exec-status').textContent)`, 5*time.Second)
	msgs := s.do("GET", appAPI+"/thread/"+tid+"/messages", token, nil).json(t)["data"].([]any)
	running := msgs[len(msgs)-1].(map[string]any)
	if running["status"] != "running" {
		t.Fatalf("the last message is %v, not running", running["status"])
	}
	if got := e2e.Eval[bool](b, "stamp", fmt.Sprintf(`new Date(document.querySelector('.msg.assistant:last-child time.sent-at').getAttribute('datetime')).getTime() === new Date(%q).getTime()`, running["created_at"])); !got {
		t.Errorf("the reattached answer is stamped %s, the turn started %s", e2e.Eval[string](b, "stamp", `document.querySelector('.msg.assistant:last-child time.sent-at').getAttribute('datetime')`), running["created_at"])
	}
	b.WaitTrue("the clock after the reattach", `/^running… [1-9]\d* s$/.test(`+card+`.querySelector('.exec-status').textContent)`, 10*time.Second)

	// Stop: a stop, not a failure.
	b.Do("stop", chromedp.Click(chromedp.ID("stop")))
	b.WaitText(".msg.assistant:last-child .turn-stopped", "Stopped.", 15*time.Second)
	b.WaitTrue("the stopped card", `/^stopped · /.test(`+card+`.querySelector('.exec-status').textContent)`, 10*time.Second)
	if n := e2e.Eval[int](b, "errors", `document.querySelectorAll('.msg.assistant:last-child .turn-error, .msg.assistant:last-child [role=alert]').length`); n != 0 {
		t.Errorf("the stopped turn shows %d errors", n)
	}
	b.Do("reload after the stop", chromedp.Reload())
	open("open the thread after the stop")
	b.WaitText(".msg.assistant:last-child .turn-stopped", "Stopped.", 10*time.Second)
	if n := e2e.Eval[int](b, "errors", `document.querySelectorAll('.msg.assistant:last-child .turn-error, .msg.assistant:last-child [role=alert]').length`); n != 0 {
		t.Errorf("the stopped turn shows %d errors after a reload", n)
	}
}

// TestE2ECSVTable: a CSV file previews as a table of 50 rows a page, read
// in ranges as the pages need them (the first page says more is to come),
// paged to its last row; its rows sort by a column, numbers as numbers,
// both ways, and filter by text.
func TestE2ECSVTable(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, token := apiThread(t, s, "Tables", "Big CSV")
	var csv strings.Builder
	csv.WriteString("id,city,amount,note\n")
	const rows = 1500
	city3 := 0
	for i := 1; i <= rows; i++ {
		fmt.Fprintf(&csv, "%d,city_%d,%d,%s\n", i, i%7, (i*37)%1000, strings.Repeat("x", 80))
		if i%7 == 3 {
			city3++
		}
	}
	if csv.Len() < 2*64<<10 {
		t.Fatalf("the CSV is %d bytes: too small to need three ranges", csv.Len())
	}
	if r := s.do("PUT", appAPI+"/thread/"+tid+"/put-file/big.csv", token, []byte(csv.String()), "Content-Type", "text/csv"); r.status != 200 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	// Every width and theme reads the table page by page to the end (the
	// later rows by ranges of their own), sorts and filters it.
	for _, tc := range []struct {
		width, height int
		scheme        string
	}{{1440, 1000, "light"}, {1440, 1000, "dark"}, {375, 812, "light"}, {375, 812, "dark"}} {
		t.Run(fmt.Sprintf("%d px %s", tc.width, tc.scheme), func(t *testing.T) {
			b := e2e.Start(t, 1440, 1000)
			emulateScheme(t, b, tc.scheme)
			uiLogin(b, s.base, e2eEmail, e2ePassword)
			b.SetViewport(tc.width, tc.height)
			b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
			item := `.file-list li[data-path="/mnt/user-data/uploads/big.csv"]`
			b.Do("preview the CSV", chromedp.Click(chromedp.CSS(item+" button.preview-toggle")))
			status := item + " .csv-status"
			first := `document.querySelector('` + item + ` tbody tr td:first-child').textContent`
			b.WaitText(status, "Rows 1–50 of ", 10*time.Second)
			if got := e2e.Eval[string](b, "the first page", `document.querySelector('`+status+`').textContent + ' ' + document.querySelectorAll('`+item+` tbody tr').length + ' ' + `+first); !strings.HasSuffix(got, "+ 50 1") {
				t.Errorf("the first page: %q, want rows 1–50 of a file read in part", got)
			}
			everyControlLabelled(t, b, "the CSV table")

			// Page to the end: the later pages are read as they are needed.
			for page := 2; page <= rows/50; page++ {
				b.Do("next rows", chromedp.Click(chromedp.CSS(item+" .csv-next")))
				b.WaitText(status, fmt.Sprintf("Rows %d–%d of ", (page-1)*50+1, page*50), 10*time.Second)
				if got := e2e.Eval[string](b, "first row", first); got != fmt.Sprint((page-1)*50+1) {
					t.Fatalf("page %d starts with row %s", page, got)
				}
			}
			if got := e2e.Eval[string](b, "the last page", `document.querySelector('`+status+`').textContent + ' ' + document.querySelector('`+item+` .csv-next').disabled`); got != fmt.Sprintf("Rows %d–%d of %d true", rows-49, rows, rows) {
				t.Errorf("the last page: %q", got)
			}

			// Sort by amount: numbers as numbers, up then down.
			amount := `document.querySelector('` + item + ` tbody tr td:nth-child(3)').textContent`
			b.Do("sort by amount", chromedp.Click(chromedp.CSS(item+` button.sort[aria-label="Sort by amount"]`)))
			if got := e2e.Eval[string](b, "sorted up", amount+` + ' ' + document.querySelector('`+item+` th[aria-sort]').getAttribute('aria-sort')`); got != "0 ascending" {
				t.Errorf("sorted by amount, up: %q", got)
			}
			b.Do("sort by amount again", chromedp.Click(chromedp.CSS(item+` button.sort[aria-label="Sort by amount"]`)))
			if got := e2e.Eval[string](b, "sorted down", amount+` + ' ' + document.querySelector('`+item+` th[aria-sort]').getAttribute('aria-sort')`); got != "999 descending" {
				t.Errorf("sorted by amount, down: %q", got)
			}

			// Filter.
			b.Do("filter", chromedp.SendKeys(chromedp.CSS(item+" .csv-filter"), "city_3"))
			b.WaitText(status, `matching "city_3"`, 5*time.Second)
			if got := e2e.Eval[string](b, "filtered", `document.querySelector('`+status+`').textContent + ' | ' + [...document.querySelectorAll('`+item+` tbody tr td:nth-child(2)')].every(td => td.textContent === 'city_3')`); got != fmt.Sprintf(`Rows 1–50 of %d matching "city_3" | true`, city3) {
				t.Errorf("filtered: %q", got)
			}
		})
	}
}

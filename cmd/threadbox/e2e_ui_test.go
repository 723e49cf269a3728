package main

// End-to-end tests of the web frontend in headless Chromium.
//
// They live in package main, beside harness_test.go, so that the server is
// started in-process through run() exactly as the API tests start it: no
// binary to build first, the same data folder for the admin CLI, and one
// process to stop. Chromium missing: t.Fatal under CI=true, skip otherwise
// (e2e.NeedChromium); the chat test also needs Docker and the sandbox image
// (needDocker).

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"threadbox/e2e"
)

const (
	e2eEmail    = "admin@acme.test"
	e2ePassword = "correct horse battery staple"
)

// e2eServer starts a server with extra settings and an org "acme" whose
// admin has the password e2ePassword, set through the admin CLI.
func e2eServer(t *testing.T, extra map[string]string) *server {
	t.Helper()
	s := startServer(t, "", extra)
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte(e2ePassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := s.cli("admin", "bootstrap", "--org", "acme", "--email", e2eEmail, "--password-file", pw); err != nil {
		t.Fatalf("bootstrap: %v %s", err, out)
	}
	return s
}

// apiLogin returns a session token for email, through the API.
func apiLogin(t *testing.T, s *server, email, password string) string {
	t.Helper()
	r := s.do("POST", appAPI+"/auth/login", "", map[string]string{"email": email, "password": password})
	if r.status != 200 {
		t.Fatalf("login %s: %d %s", email, r.status, r.body)
	}
	return r.json(t)["token"].(string)
}

// uiLogin signs in through the login page and waits for the sidebar.
func uiLogin(b *e2e.Browser, base, email, password string) {
	b.Do("open the login page",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.ID("email")),
		chromedp.SendKeys(chromedp.ID("email"), email),
		chromedp.SendKeys(chromedp.ID("password"), password),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("new-project")))
}

// apiThread signs the e2e user in through the API and makes a project and
// a thread in it; it returns the thread's id and the user's token.
func apiThread(t *testing.T, s *server, project, title string) (string, string) {
	t.Helper()
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	pid := s.do("POST", appAPI+"/project", token, map[string]any{"name": project}).json(t)["id"]
	return s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": pid, "title": title}).json(t)["id"].(string), token
}

// threadPage makes a project and a thread in it (apiThread), then opens a
// browser of width×height, signs in and shows the thread; it returns the
// browser, the thread's id and an API token of the user.
func threadPage(t *testing.T, s *server, project, title string, width, height int) (*e2e.Browser, string, string) {
	t.Helper()
	tid, token := apiThread(t, s, project, title)
	b := e2e.Start(t, width, height)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	return b, tid, token
}

// shoot saves a screenshot that the test keeps (for the docs and for a
// look), logging where.
func shoot(t *testing.T, b *e2e.Browser, name string) {
	t.Helper()
	path, err := b.Screenshot(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// shootViewport saves what the viewport shows with the element matching
// selector scrolled to its middle: the size of the screenshots in docs/.
func shootViewport(t *testing.T, b *e2e.Browser, name, selector string) {
	t.Helper()
	b.Do("scroll to "+selector, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).scrollIntoView({block: 'center'})`, selector)))
	png := e2e.Run(b, "screenshot", chromedp.CaptureScreenshot())
	dir, err := e2e.ArtifactsDir()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, t.Name()+"-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// everyControlLabelled fails for a control of the page with no accessible
// name: a form field without a label or aria-label, a button without text
// or aria-label. Controls in a closed dialog or a hidden part are not
// exposed and not checked.
func everyControlLabelled(t *testing.T, b *e2e.Browser, page string) {
	t.Helper()
	bad := e2e.Eval[[]string](b, "unlabelled controls", `[...document.querySelectorAll('input, select, textarea, button')]
		.filter(el => {
			if (el.closest('dialog:not([open]), [hidden]')) return false; // not shown, not exposed
			if (el.getAttribute('aria-label') || el.getAttribute('aria-labelledby')) return false;
			if (el.tagName === 'BUTTON') return el.textContent.trim() === '';
			return !el.labels || el.labels.length === 0 || [...el.labels].every(l => l.textContent.trim() === '');
		})
		.map(el => el.outerHTML.slice(0, 120))`)
	if len(bad) > 0 {
		t.Errorf("%s: controls without a label: %v", page, bad)
	}
	n := e2e.Eval[int](b, "landmarks", `['header', 'nav', 'main'].filter(s => document.querySelector(s)).length`)
	if n != 3 {
		t.Errorf("%s: %d of the landmarks header, nav, main", page, n)
	}
}

// noHorizontalOverflow fails when the page is wider than the viewport.
func noHorizontalOverflow(t *testing.T, b *e2e.Browser, width int) {
	t.Helper()
	got := e2e.Eval[int](b, "page width", `document.documentElement.scrollWidth`)
	if got > width {
		wide := e2e.Eval[string](b, "widest elements", fmt.Sprintf(`[...document.querySelectorAll('body *')]
			.filter(e => e.getBoundingClientRect().right > %d + 1).slice(0, 5)
			.map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right)).join('; ')`, width))
		t.Errorf("at %d px the page is %d px wide (scrolls sideways): %s", width, got, wide)
	}
}

const salesCSV = "month,sales\nJan,12\nFeb,19\nMar,7\nApr,23\n"

// plotMessage is the user's message: prose and a python block that reads
// the uploaded CSV, prints it, pauses so the live stream can be seen, and
// plots it into outputs.
const plotMessage = "Plot the sales.\n```python\n" +
	"import time, sys\n" +
	"import pandas as pd\n" +
	"import matplotlib\n" +
	"matplotlib.use('Agg')\n" +
	"import matplotlib.pyplot as plt\n" +
	"df = pd.read_csv('/mnt/user-data/uploads/sales.csv')\n" +
	"print('rows', len(df), 'total', int(df['sales'].sum()))\n" +
	"print('plotting', file=sys.stderr)\n" +
	"sys.stdout.flush()\n" +
	"time.sleep(2)\n" +
	"df.plot(x='month', y='sales', kind='bar')\n" +
	"plt.savefig('/mnt/user-data/outputs/sales.png')\n" +
	"```\nThen a summary, a binary file and a long listing.\n```bash\n" +
	"printf 'region,total\\nNorth,40\\nSouth,21\\n' > /mnt/user-data/outputs/summary.csv\n" +
	"head -c 3000 /dev/zero > /mnt/user-data/outputs/blob.bin\n" +
	"seq 1 500\n" +
	"```"

// TestE2EChat is the frontend's main scenario: log in; create a project and a
// thread; upload a CSV with the file picker; send a python block that plots
// it; watch the turn stream (the code card shows before its result); see
// stdout, stderr, the exit code and the image preview; download the image
// and compare its bytes with the sandbox's; then, as admin, switch off
// generated downloads and see the download refused with a message naming
// the feature; switch off code execution and see a turn answered without
// running code. Screenshots at 1440 and 375 px wide are kept.
func TestE2EChat(t *testing.T) {
	e2e.NeedChromium(t)
	agent := needDocker(t)
	s := e2eServer(t, map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": agent, "MODEL_PROVIDER": "runner"})
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)

	// A project and a thread, through the sidebar and the dialog.
	b.Do("create a project",
		chromedp.SendKeys(chromedp.ID("new-project"), "Sales"),
		chromedp.Click(chromedp.CSS(".new-project button[type=submit]")))
	// The sidebar is drawn again when the project arrives; the new
	// project's "New thread" button then takes the focus.
	b.WaitTrue("focus on New thread", `document.activeElement.classList.contains('new-thread')`, 10*time.Second)
	b.Do("create a thread",
		chromedp.Click(chromedp.CSS(".project .new-thread")),
		chromedp.WaitVisible(chromedp.ID("dialog-input")),
		chromedp.SetValue(chromedp.ID("dialog-input"), "Monthly sales"),
		chromedp.Click(chromedp.ID("dialog-ok")),
		chromedp.WaitVisible(chromedp.ID("message")))
	b.WaitText("#thread-title", "Monthly sales", 10*time.Second)
	loc := e2e.Run(b, "location", chromedp.Location())
	tid := loc[strings.Index(loc, "#/thread/")+len("#/thread/"):]
	if th := s.do("GET", appAPI+"/thread/"+tid, token, nil); th.status != 200 || th.json(t)["title"] != "Monthly sales" {
		t.Fatalf("the thread the page shows is not stored: %d %s", th.status, th.body)
	}
	b.WaitText(fmt.Sprintf(`.threads a[data-thread-id=%q]`, tid), "Monthly sales", 5*time.Second)

	// Upload a CSV with the file picker.
	csvPath := filepath.Join(t.TempDir(), "sales.csv")
	if err := os.WriteFile(csvPath, []byte(salesCSV), 0o644); err != nil {
		t.Fatal(err)
	}
	b.Do("pick the CSV", chromedp.SetUploadFiles(chromedp.ID("file-input"), []string{csvPath}))
	b.WaitText(`.upload[data-name="sales.csv"]`, "Uploaded to /mnt/user-data/uploads/sales.csv", 30*time.Second)
	b.WaitText(`.file-list li[data-path="/mnt/user-data/uploads/sales.csv"]`, "sales.csv", 10*time.Second)
	up := s.do("GET", appAPI+"/thread/"+tid+"/download-file?path="+url.QueryEscape("/mnt/user-data/uploads/sales.csv"), token, nil)
	if up.status != 200 || string(up.body) != salesCSV {
		t.Fatalf("uploaded CSV in the sandbox: %d %q", up.status, up.body)
	}

	// Send the message; the code card shows while the code runs.
	b.Do("send the message",
		chromedp.SetValue(chromedp.ID("message"), plotMessage),
		chromedp.Click(chromedp.ID("send")))
	b.WaitTrue("the code card while the code runs (a live stream)",
		`document.querySelector('.msg.assistant .exec.running') && document.querySelector('.msg.assistant .exec .command').textContent.includes("read_csv('/mnt/user-data/uploads/sales.csv')")`,
		60*time.Second)
	// A python block shows as the python it runs, not as its bash wrapper.
	if got := e2e.Eval[string](b, "python card", `(() => { const c = document.querySelector('.msg.assistant .exec'); return c.querySelector('.badge').textContent + ' | ' + c.querySelector('.command').textContent; })()`); !strings.HasPrefix(got, "python | ") || strings.Contains(got, "THREADBOX_PY_EOF") || strings.Contains(got, "python3 - <<") {
		t.Errorf("the python block's card: %q", got)
	}
	if got := e2e.Eval[string](b, "streamed text", `document.querySelector('.msg.assistant .text').textContent`); !strings.Contains(got, "Running block 1 of 2 (python)") {
		t.Errorf("the text before the code card: %q", got)
	}
	b.WaitText(".msg.assistant .exec .exit-code", "Exit code: 0", 90*time.Second)
	if got := e2e.Eval[string](b, "stdout", `document.querySelector('.msg.assistant .exec .output.stdout pre').textContent`); got != "rows 4 total 61\n" {
		t.Errorf("stdout shown: %q", got)
	}
	if got := e2e.Eval[string](b, "stderr", `document.querySelector('.msg.assistant .exec .output.stderr pre').textContent`); !strings.Contains(got, "plotting") {
		t.Errorf("stderr shown: %q", got)
	}
	b.WaitTrue("the image preview", `(() => { const i = document.querySelector('.artifact[data-name="sales.png"] img.image-preview'); return i && i.complete && i.naturalWidth > 100; })()`, 30*time.Second)
	b.WaitTrue("the end of the turn", `!document.querySelector('.msg.assistant[aria-busy]') && document.querySelectorAll('.msg.assistant .text').length >= 2`, 30*time.Second)
	if got := e2e.Eval[string](b, "summary", `[...document.querySelectorAll('.msg.assistant .text')].pop().textContent`); !strings.Contains(got, "Ran 2 code block(s)") {
		t.Errorf("final text: %q", got)
	}
	// The CSV output previews as a table, the binary one as a download
	// card with name, type and size, and 500 lines of stdout are collapsed.
	b.WaitText(`.artifact[data-name="summary.csv"] table tbody`, "North40South21", 20*time.Second)
	if got := e2e.Eval[string](b, "csv header", `document.querySelector('.artifact[data-name="summary.csv"] table thead').textContent`); got != "regiontotal" {
		t.Errorf("CSV preview header: %q", got)
	}
	if got := e2e.Eval[string](b, "binary card", `document.querySelector('.artifact[data-name="blob.bin"] figcaption').textContent`); !strings.Contains(got, "blob.bin") ||
		!strings.Contains(got, "application/octet-stream") || !strings.Contains(got, "2.9 KB") || !strings.Contains(got, "Download") {
		t.Errorf("download card of blob.bin: %q", got)
	}
	if got := e2e.Eval[string](b, "long output", `(() => { const d = document.querySelectorAll('.msg.assistant .exec')[1].querySelector('details.output.stdout'); return (d.open ? 'open ' : 'closed ') + d.querySelector('summary').textContent; })()`); got != "closed stdout — 500 lines, collapsed (show)" {
		t.Errorf("long stdout: %q", got)
	}
	b.WaitText(".file-list", "sales.png", 10*time.Second)
	everyControlLabelled(t, b, "thread page")
	b.WaitText(`ul[aria-label="Project artifacts"]`, "sales.png", 10*time.Second)

	// Download the image and compare its bytes with the artifact's
	// content as the API serves it (a generated PNG is signed on download,
	// so the file in the sandbox is a few KB shorter).
	pid := s.do("GET", appAPI+"/thread/"+tid, token, nil).json(t)["project_id"].(string)
	var salesURL string
	for _, a := range s.do("GET", appAPI+"/project/"+pid+"/artifacts", token, nil).json(t)["data"].([]any) {
		if a := a.(map[string]any); a["name"] == "sales.png" {
			salesURL = a["download_url"].(string)
		}
	}
	want := s.do("GET", salesURL, token, nil)
	if want.status != 200 || !bytes.HasPrefix(want.body, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("sandbox's sales.png: %d %q", want.status, want.body[:min(len(want.body), 64)])
	}
	b.Do("download the image", chromedp.Click(chromedp.CSS(`.artifact[data-name="sales.png"] button.download`)))
	if got := b.WaitDownload("sales.png", 30*time.Second); !bytes.Equal(got, want.body) {
		t.Fatalf("downloaded %d bytes, the sandbox holds %d: they differ", len(got), len(want.body))
	}

	shoot(t, b, "thread-1440")
	shootViewport(t, b, "view-1440", `.artifact[data-name="sales.png"]`)
	b.SetViewport(375, 812)
	b.WaitTrue("the narrow layout", `document.getElementById('menu').offsetParent !== null`, 5*time.Second)
	noHorizontalOverflow(t, b, 375)
	shoot(t, b, "thread-375")
	shootViewport(t, b, "view-375", `.msg.assistant .exec`)
	b.SetViewport(1440, 1000)

	// As admin, switch off generated downloads: the download is refused
	// with a message naming the feature.
	b.Do("open the admin page", chromedp.Click(chromedp.ID("nav-admin")), chromedp.WaitVisible(chromedp.ID("f-generated")))
	b.Do("switch off generated downloads", chromedp.Click(chromedp.ID("f-generated")))
	b.WaitText(".admin .saved", "downloads of generated files off", 10*time.Second)
	if f := s.do("GET", appAPI+"/org/features", token, nil).json(t); f["downloads"].(map[string]any)["generated"] != false {
		t.Fatalf("policy after the switch: %v", f)
	}
	b.WaitText("#audit", "org.features.update", 10*time.Second)
	// The usage panel counts the turn's command for the admin, and today's
	// bar of the chart is drawn.
	b.WaitText("#usage", e2eEmail, 10*time.Second)
	b.WaitTrue("today's usage bar", `(() => { const bars = document.querySelectorAll('#usage-chart .bar'); return bars.length === 30 && bars[29].dataset.day === new Date().toISOString().slice(0, 10); })()`, 5*time.Second)
	// Per thread, the row names the thread by its title.
	b.Do("usage per thread", chromedp.SetValue(chromedp.ID("usage-by"), "thread"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('usage-by').dispatchEvent(new Event('change'))`))
	b.WaitText(fmt.Sprintf(`#usage tr[data-thread-id=%q]`, tid), "Monthly sales", 10*time.Second)
	shoot(t, b, "admin-1440")
	b.Do("back to the thread",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`.threads a[data-thread-id=%q]`, tid))),
		chromedp.WaitVisible(chromedp.CSS(`.artifact[data-name="sales.png"] button.download`)))
	// The history shows the stored turn: its code card, and the preview
	// refused like the download.
	b.WaitText(".msg.assistant .exec .exit-code", "Exit code: 0", 10*time.Second)
	b.WaitText(`.artifact[data-name="sales.png"] .preview`, "No preview: Refused: your organization's admin has switched off downloads of generated files (downloads.generated).", 10*time.Second)
	b.Do("download again", chromedp.Click(chromedp.CSS(`.artifact[data-name="sales.png"] button.download`)))
	msg := b.WaitText(`.artifact[data-name="sales.png"] .download-wrap .inline-error`, "downloads.generated", 10*time.Second)
	if !strings.Contains(msg, "switched off downloads of generated files") {
		t.Errorf("refusal shown: %q", msg)
	}
	b.WaitText("#notice-text", "downloads.generated", 5*time.Second)

	// Switch off code execution: the next turn is answered without running
	// code, and the page says why.
	b.Do("open the admin page", chromedp.Click(chromedp.ID("nav-admin")), chromedp.WaitVisible(chromedp.ID("f-code")))
	b.Do("switch off code execution", chromedp.Click(chromedp.ID("f-code")))
	b.WaitText(".admin .saved", "code execution off", 10*time.Second)
	b.Do("back to the thread",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`.threads a[data-thread-id=%q]`, tid))),
		chromedp.WaitVisible(chromedp.ID("message")))
	b.WaitText(".policy-note", "switched off by your organization's admin (codeExecution)", 10*time.Second)
	// The "run code" box says the same: unticked and disabled, and the
	// note stands by the composer, not at the top of the thread.
	if got := e2e.Eval[string](b, "run code box", `(() => { const c = document.getElementById('run-code'); const n = document.querySelector('.policy-note'); return c.checked + ' ' + c.disabled + ' ' + (n.nextElementSibling && n.nextElementSibling.classList.contains('composer')); })()`); got != "false true true" {
		t.Errorf("the run-code box and the note while code execution is off: %q", got)
	}
	// The history (two code cards of the first turn) is drawn beside the
	// policy note: wait for it before counting.
	b.WaitTrue("the thread's history", `document.querySelectorAll('.exec').length >= 2`, 10*time.Second)
	runsBefore := e2e.Eval[int](b, "code cards", `document.querySelectorAll('.exec').length`)
	b.Do("send a message with code",
		chromedp.SetValue(chromedp.ID("message"), "```python\nopen('/mnt/user-data/outputs/should-not-exist.txt', 'w').write('x')\n```"),
		chromedp.Click(chromedp.ID("send")))
	b.WaitText(".msg.assistant:last-child .turn-note", "switched off code execution (codeExecution)", 60*time.Second)
	if got := e2e.Eval[string](b, "answer", `document.querySelector('.msg.assistant:last-child .text').textContent`); !strings.Contains(got, "code execution is not enabled") || strings.Contains(got, "code_execution_20250825") {
		t.Errorf("answer without code execution: %q", got)
	}
	if n := e2e.Eval[int](b, "code cards", `document.querySelectorAll('.exec').length`); n != runsBefore {
		t.Errorf("a code card appeared with code execution off: %d before, %d after", runsBefore, n)
	}
	if r := s.do("GET", "/api/gpt/v1/files?limit=1000&scope_id="+tid, token, nil); r.status != 200 || strings.Contains(string(r.body), "should-not-exist") {
		t.Errorf("the code ran anyway (or the files are not listed): %d %s", r.status, r.body)
	}
}

// TestE2EReattachAndStop: in the browser, a command's output shows in its
// card as it is produced; a reload during the command reattaches the card
// to the running turn, which shows the rest of the output; Stop marks the
// card stopped with its output kept, and a reload shows the turn stopped.
func TestE2EReattachAndStop(t *testing.T) {
	e2e.NeedChromium(t)
	agent := needDocker(t)
	s := e2eServer(t, map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": agent, "MODEL_PROVIDER": "runner"})
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	p := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Live"})
	th := s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": p.json(t)["id"], "title": "Ticks"})
	if th.status != 201 {
		t.Fatalf("thread: %d %s", th.status, th.body)
	}
	tid := th.json(t)["id"].(string)
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	open := func(what string) {
		b.Do(what, chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	}
	open("open the thread")
	b.Do("send a slow command",
		chromedp.SetValue(chromedp.ID("message"), "```bash\nfor i in $(seq 1 30); do echo tick$i; sleep 1; done\n```"),
		chromedp.Click(chromedp.ID("send")))
	b.WaitText(".msg.assistant .exec pre.live.stdout", "tick2", 60*time.Second)
	if got := e2e.Eval[string](b, "status", `document.querySelector('.msg.assistant .exec .exec-status').textContent`); !strings.HasPrefix(got, "running… ") || !strings.HasSuffix(got, " s") {
		t.Errorf("the running card's status: %q", got)
	}

	// Reload mid-command: the card reattaches and goes on.
	b.Do("reload", chromedp.Reload())
	open("open the thread again")
	b.WaitText(".msg.assistant:last-child .exec pre.live.stdout", "tick1\ntick2", 20*time.Second)
	b.WaitText(".msg.assistant:last-child .exec pre.live.stdout", "tick5", 20*time.Second)
	b.WaitTrue("Stop offered, Send not", `!document.getElementById('stop').hidden && document.getElementById('send').disabled`, 5*time.Second)

	b.Do("stop", chromedp.Click(chromedp.ID("stop")))
	b.WaitText(".msg.assistant:last-child .turn-stopped", "Stopped.", 10*time.Second)
	// The card shows the command stopped, with its output so far (the
	// stopped call's result); its status may say how long it ran.
	card := `(() => { const c = document.querySelector('.msg.assistant:last-child .exec'); return c.className + ' | ' + c.querySelector('.exec-status').textContent.split(' · ')[0] + ' | ' + c.querySelector('.output.stdout pre').textContent; })()`
	b.WaitTrue("the stopped card", card+`.includes('stopped | stopped | tick1\ntick2')`, 10*time.Second)
	b.WaitTrue("Send offered again", `document.getElementById('stop').hidden && !document.getElementById('send').disabled`, 5*time.Second)
	n := strings.Count(e2e.Eval[string](b, "output", `document.querySelector('.msg.assistant:last-child .exec .output.stdout pre').textContent`), "tick")

	// After a reload the turn shows as stopped, and the command ran no
	// further.
	b.Do("reload after the stop", chromedp.Reload())
	open("open the thread after the stop")
	b.WaitText(".msg.assistant:last-child .turn-stopped", "Stopped.", 10*time.Second)
	b.WaitTrue("the stopped card after a reload", card+`.includes('stopped | stopped | tick1\ntick2')`, 10*time.Second)
	if n >= 30 {
		t.Fatalf("the command ran to its end: %d ticks", n)
	}
}

// TestE2EArtifactsOfOneName: two threads of a project each write
// report.txt; the project's artifact list tells the two apart (once they
// looked the same).
func TestE2EArtifactsOfOneName(t *testing.T) {
	e2e.NeedChromium(t)
	agent := needDocker(t)
	s := e2eServer(t, map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": agent, "MODEL_PROVIDER": "runner"})
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	pid := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Reports"}).json(t)["id"]
	var tids []string
	for i, title := range []string{"North", "South"} {
		tid := s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": pid, "title": title}).json(t)["id"].(string)
		tids = append(tids, tid)
		r := s.do("POST", appAPI+"/thread/"+tid+"/messages", token, map[string]any{
			"content": fmt.Sprintf("```bash\necho %d > /mnt/user-data/outputs/report.txt\n```", i), "pgpt": map[string]any{"tools": []any{"code_execution"}}})
		if r.status != 200 {
			t.Fatalf("turn in %s: %d %s", title, r.status, r.body)
		}
	}
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open South", chromedp.Navigate(s.base+"/#/thread/"+tids[1]), chromedp.WaitVisible(chromedp.ID("message")))
	b.WaitTrue("two report.txt", `document.querySelectorAll('ul[aria-label="Project artifacts"] li[data-artifact-id]').length === 2`, 20*time.Second)
	got := e2e.Eval[string](b, "origins", `[...document.querySelectorAll('ul[aria-label="Project artifacts"] li[data-artifact-id]')].map(li => li.querySelector('.file-name').textContent + ': ' + li.querySelector('.origin').textContent).sort().join(' | ')`)
	want := "report.txt: from another thread by " + e2eEmail + " | report.txt: from this thread by " + e2eEmail
	if got != want {
		t.Errorf("the two artifacts: %q, want %q", got, want)
	}
}

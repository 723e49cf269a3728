package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"threadbox/e2e"
	"threadbox/infra/llm/fakeupstream"
)

// TestE2ETerminal opens the thread's live terminal in Chromium: the
// session the model started with exec_command is listed in the thread's
// side panel, its terminal view (xterm.js) replays the output from before
// the viewer joined, and what the owner types there runs in the sandbox
// and shows; at 1440 px and 375 px, in the light and dark themes, each
// typing its own command into the one session. A session that ends while
// the view is open leaves the sign-in form in sight, the view closed.
func TestE2ETerminal(t *testing.T) {
	e2e.NeedChromium(t)
	agent := needDocker(t)
	fake := fakeupstream.New()
	t.Cleanup(fake.Close)
	s := e2eServer(t, map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": agent,
		"MODEL_PROVIDER": "anthropic", "MODEL_BASE_URL": fake.URL(), "MODEL_NAME": "fake-model"})
	tid, token := apiThread(t, s, "Terminals", "Live terminal")
	sid := startTerminal(t, s, fake, token, tid)

	item := `.terminal-list li[data-session-id="` + sid + `"]`
	rows := `document.querySelector('.terminal-dialog .xterm-rows')`
	for _, tc := range []struct {
		width, height int
		scheme        string
	}{{1440, 1000, "light"}, {1440, 1000, "dark"}, {375, 812, "light"}, {375, 812, "dark"}} {
		name := fmt.Sprintf("%d-%s", tc.width, tc.scheme)
		t.Run(fmt.Sprintf("%d px %s", tc.width, tc.scheme), func(t *testing.T) {
			b := e2e.Start(t, 1440, 1000)
			emulateScheme(t, b, tc.scheme)
			uiLogin(b, s.base, e2eEmail, e2ePassword)
			b.SetViewport(tc.width, tc.height)
			b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
			b.WaitTrue("the session is listed", `(() => { const li = document.querySelector('`+item+`');
				return !!li && li.dataset.status === 'running' && li.querySelector('.terminal-command').textContent.includes('before-join') })()`, 10*time.Second)
			b.Do("open the terminal", chromedp.Evaluate[chromedp.Void](`document.querySelector('`+item+` button.open-terminal').scrollIntoView()`),
				chromedp.Click(chromedp.CSS(item+" button.open-terminal")))
			// The output from before the viewer joined is replayed.
			b.WaitTrue("the replay", rows+` && `+rows+`.textContent.includes('before-join')`, 15*time.Second)
			// The emulator's own rules reached the page (as constructed
			// style sheets, which the page's CSP allows): its input field
			// sits out of sight, and the screen has the theme's colours.
			if got := e2e.Eval[string](b, "the emulator's styles", `(() => {
				const ta = document.querySelector('.terminal-dialog .xterm-helper-textarea');
				const screen = document.querySelector('.terminal-dialog .xterm-screen');
				return [getComputedStyle(ta).opacity, document.adoptedStyleSheets.length > 0, screen.getBoundingClientRect().height > 100].join(' ');
			})()`); got != "0 true true" {
				t.Errorf("the emulator's styles: %q", got)
			}
			// The owner types; the command runs in the sandbox and its
			// output shows.
			typed := "echo typed-$((6*7))-" + name
			b.Do("focus the terminal", chromedp.Focus(chromedp.CSS(".terminal-dialog .xterm-helper-textarea")))
			typeKeys(t, b, typed+"\r")
			b.WaitTrue("its output", rows+`.textContent.includes('typed-42-`+name+`')`, 15*time.Second)
			if got := e2e.Eval[string](b, "the note", `document.querySelector('.terminal-dialog .terminal-note').textContent`); got == "" {
				t.Error("the terminal view says nothing about who may type")
			}
			if tc.width == 375 {
				noHorizontalOverflow(t, b, 375)
			}
			png := e2e.Run(b, "screenshot", chromedp.CaptureScreenshot())
			dir, err := e2e.ArtifactsDir()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "TestE2ETerminal-"+name+".png")
			if err := os.WriteFile(path, png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("screenshot: %s", path)
			b.Do("close the terminal", chromedp.Click(chromedp.CSS(".terminal-dialog .terminal-close")))
			b.WaitTrue("the view closed", `!document.querySelector('.terminal-dialog')`, 5*time.Second)
		})
	}
	// A session that ends while the terminal view is open: the owner's
	// next key is refused, and the sign-in form is what the page shows,
	// not under the modal view.
	t.Run("session ended with the view open", func(t *testing.T) {
		b := e2e.Start(t, 1440, 1000)
		uiLogin(b, s.base, e2eEmail, e2ePassword)
		b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
		b.WaitTrue("the session is listed", `!!document.querySelector('`+item+` button.open-terminal')`, 10*time.Second)
		b.Do("open the terminal", chromedp.Evaluate[chromedp.Void](`document.querySelector('`+item+` button.open-terminal').scrollIntoView()`),
			chromedp.Click(chromedp.CSS(item+" button.open-terminal")))
		b.WaitTrue("the replay", rows+` && `+rows+`.textContent.includes('before-join')`, 15*time.Second)
		b.Do("revoke the session", chromedp.Evaluate[chromedp.Void](`(async () => {
			const s = await (await fetch('/api/v1/app/auth/refresh', {method: 'POST', headers: {'X-Threadbox-Refresh': '1'}})).json();
			await fetch('/api/v1/app/tokens/' + s.id, {method: 'DELETE', headers: {Authorization: 'Bearer ' + s.token}});
		})()`, chromedp.EvalAwaitPromise))
		b.Do("focus the terminal", chromedp.Focus(chromedp.CSS(".terminal-dialog .xterm-helper-textarea")))
		typeKeys(t, b, "x")
		b.WaitText("#login-error", "Your session has expired or was revoked. Please sign in again.", 10*time.Second)
		if open := e2e.Eval[int](b, "open dialogs", `document.querySelectorAll('dialog[open]').length`); open != 0 {
			t.Errorf("%d dialogs still open over the sign-in form", open)
		}
	})
	if evs := auditEvents(t, s, token, "terminal.input"); len(evs) < 4 {
		t.Errorf("%d inputs audited, want one or more for each of the 4 views", len(evs))
	}
}

// typeKeys types text into the focused element as a keyboard does: one
// key press a character, the key down carrying its text ("\r" is Enter).
// (chromedp.KeyEvent adds a char event of its own after each key down,
// which a terminal emulator, reading key presses and input events, takes
// as a second key.)
func typeKeys(t *testing.T, b *e2e.Browser, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), 20*time.Second)
	defer cancel()
	for _, r := range text {
		down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Text: string(r), Key: string(r)}
		up := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp, Key: string(r)}
		if r == '\r' {
			down = input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Text: "\r", Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13}
			up = input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13}
		}
		for _, ev := range []input.DispatchKeyEventParams{down, up} {
			if _, err := chromedp.Call(ctx, input.DispatchKeyEvent, ev); err != nil {
				t.Fatalf("type %q: %v", r, err)
			}
		}
	}
}

package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"threadbox/e2e"
)

// TestE2EEditAndRegenerate: the last answer can be regenerated
// and the last user message edited and sent again; each starts a new turn
// and the one it replaces stays in the thread as an earlier version, in
// the page, after a reload, in the API (replaced) and in a fork. A
// ‹ k / n › switcher shows each version in the latest one's place. Only
// the last message and the last answer offer the actions; the edit form
// is labelled, and Escape puts the message back with the focus on Edit.
// The API refuses a regenerate with content, an unknown mode and a
// regenerate in an empty thread.
func TestE2EEditAndRegenerate(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, token := apiThread(t, s, "Drafts", "Versions")
	turnURL := appAPI + "/thread/" + tid + "/messages"
	if r := s.do("POST", turnURL, token, map[string]any{"replace": "last_answer"}); r.status != 409 {
		t.Errorf("regenerate in an empty thread: %d %s", r.status, r.body)
	}
	for _, m := range []string{"first question", "second question"} {
		if r := s.do("POST", turnURL, token, map[string]any{"content": m}); r.status != 200 {
			t.Fatalf("turn: %d %s", r.status, r.body)
		}
	}
	if r := s.do("POST", turnURL, token, map[string]any{"replace": "last_answer", "content": "x"}); r.status != 400 {
		t.Errorf("regenerate with content: %d %s", r.status, r.body)
	}
	if r := s.do("POST", turnURL, token, map[string]any{"replace": "first_turn", "content": "x"}); r.status != 400 {
		t.Errorf("an unknown replace: %d %s", r.status, r.body)
	}
	stored := func(threadID string) string {
		var out []string
		for _, m := range s.do("GET", appAPI+"/thread/"+threadID+"/messages", token, nil).json(t)["data"].([]any) {
			m := m.(map[string]any)
			d := m["role"].(string)
			if c, ok := m["content"].([]any); ok && m["role"] == "user" && len(c) > 0 {
				d += ":" + c[0].(map[string]any)["text"].(string)
			}
			if m["replaced"] == true {
				d += "(replaced)"
			}
			out = append(out, d)
		}
		return strings.Join(out, " ")
	}

	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	b.WaitTrue("four messages", `document.querySelectorAll('.msg').length === 4`, 10*time.Second)
	// The actions sit on the last user message and the last answer only.
	actions := `(() => { const top = [...document.querySelectorAll('.messages:not(.replaced-list) > .msg')];
		const at = (sel) => [...document.querySelectorAll(sel)].map(b => top.indexOf(b.closest('.msg'))).join(',');
		return at('button.edit') + '|' + at('button.regenerate'); })()`
	if got := e2e.Eval[string](b, "actions", actions); got != "2|3" {
		t.Errorf("Edit and Regenerate on messages %q, want on 2 and 3 (of 0..3)", got)
	}

	// Regenerate: a new answer; the old one kept as an earlier version.
	b.Do("regenerate", chromedp.Click(chromedp.CSS("button.regenerate")))
	b.WaitTrue("the new answer", `document.querySelectorAll('.replaced-group .msg.assistant').length === 1 &&
		document.querySelectorAll('.messages:not(.replaced-list) > .msg').length === 4 &&
		!document.querySelector('[aria-busy]') && !!document.querySelector('.messages:not(.replaced-list) > .msg:last-child button.regenerate')`, 30*time.Second)
	if got := e2e.Eval[string](b, "last answer", `document.querySelector('.messages:not(.replaced-list) > .msg:last-child .text').textContent`); !strings.Contains(got, "offline runner model") {
		t.Errorf("the regenerated answer: %q", got)
	}
	if got, want := stored(tid), "user:first question assistant user:second question assistant(replaced) assistant"; got != want {
		t.Errorf("stored after the regenerate:\n%s\nwant:\n%s", got, want)
	}

	// Edit: Escape puts the message back, focus on Edit.
	b.Do("open the edit form", chromedp.Click(chromedp.CSS("button.edit")), chromedp.WaitVisible(chromedp.ID("edit-message")))
	if got := e2e.Eval[string](b, "edit form", `document.activeElement.id + '|' + document.activeElement.value`); got != "edit-message|second question" {
		t.Errorf("the edit form's field: %q", got)
	}
	everyControlLabelled(t, b, "the edit form")
	b.Do("Escape", chromedp.KeyEvent(kb.Escape))
	b.WaitTrue("the message back", `!document.getElementById('edit-message') && document.activeElement.classList.contains('edit')`, 5*time.Second)
	b.Do("edit and send with Enter",
		chromedp.Click(chromedp.CSS("button.edit")), chromedp.WaitVisible(chromedp.ID("edit-message")),
		chromedp.KeyEvent(kb.End), chromedp.KeyEvent(", edited\r"))
	b.WaitTrue("the edited turn", `document.querySelectorAll('.messages:not(.replaced-list) > .msg').length === 4 &&
		document.querySelector('.messages:not(.replaced-list) > .msg.user:nth-last-child(2)') &&
		document.querySelector('.messages:not(.replaced-list) > .msg.user:nth-last-child(2)').textContent.includes('second question, edited') &&
		!document.querySelector('[aria-busy]') && !!document.querySelector('.messages:not(.replaced-list) > .msg:last-child button.regenerate')`, 30*time.Second)
	folded := `(() => { const g = [...document.querySelectorAll('.replaced-group')];
		return g.length + ':' + g.map(x => [...x.querySelectorAll('.msg')].map(m => m.classList.contains('user') ? 'user' : 'assistant').join(',') + (x.querySelector('.replaced-list').hidden ? ' folded' : ' open') + ' ' + x.querySelector('.version-count').textContent).join(';'); })()`
	const want = "1:user,assistant,assistant folded 3 / 3"
	if got := e2e.Eval[string](b, "earlier versions", folded); got != want {
		t.Errorf("earlier versions in the page: %q, want %q", got, want)
	}
	if got, want := stored(tid), "user:first question assistant user:second question(replaced) assistant(replaced) assistant(replaced) user:second question, edited assistant"; got != want {
		t.Errorf("stored after the edit:\n%s\nwant:\n%s", got, want)
	}
	b.Do("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("message")))
	b.WaitTrue("the thread again", `document.querySelectorAll('.msg').length === 7`, 10*time.Second)
	if got := e2e.Eval[string](b, "earlier versions after a reload", folded); got != want {
		t.Errorf("earlier versions after a reload: %q, want %q", got, want)
	}
	// The switcher: each earlier version in the latest one's place.
	shown := `(() => [...document.querySelectorAll('.msg')].filter(m => m.offsetParent !== null)
		.map(m => (m.classList.contains('user') ? 'user:' + m.querySelector('.text').textContent.trim() : 'assistant')).join(' ') + ' | ' + document.querySelector('.version-count').textContent)()`
	for _, step := range []struct{ button, want string }{
		{"", "user:first question assistant user:second question, edited assistant | 3 / 3"},
		{".version-prev", "user:first question assistant assistant | 2 / 3"},
		{".version-prev", "user:first question assistant user:second question assistant | 1 / 3"},
		{".version-next", "user:first question assistant assistant | 2 / 3"},
		{".version-next", "user:first question assistant user:second question, edited assistant | 3 / 3"},
	} {
		if step.button != "" {
			b.Do("switch versions", chromedp.Click(chromedp.CSS(".replaced-group "+step.button)))
		}
		if got := e2e.Eval[string](b, "the version shown", shown); got != step.want {
			t.Errorf("after %q the thread shows %q, want %q", step.button, got, step.want)
		}
	}
	if got := e2e.Eval[string](b, "ends", `document.querySelector('.version-prev').disabled + ' ' + document.querySelector('.version-next').disabled`); got != "false true" {
		t.Errorf("at the latest version Previous and Next disabled: %s", got)
	}
	b.Do("show the first version", chromedp.Click(chromedp.CSS(".replaced-group .version-prev")), chromedp.Click(chromedp.CSS(".replaced-group .version-prev")))
	everyControlLabelled(t, b, "an earlier version shown")
	if n := e2e.Eval[int](b, "actions in earlier versions", `document.querySelectorAll('.replaced-group button.edit, .replaced-group button.regenerate').length`); n != 0 {
		t.Errorf("%d actions on earlier versions", n)
	}
	noHorizontalOverflow(t, b, 1440)

	// A fork keeps the earlier versions as they are.
	fork := s.do("POST", appAPI+"/thread/"+tid+"/fork", token, nil)
	if fork.status != 201 {
		t.Fatalf("fork: %d %s", fork.status, fork.body)
	}
	if got, want := stored(fork.json(t)["id"].(string)), stored(tid); got != want {
		t.Errorf("the fork's messages:\n%s\nwant:\n%s", got, want)
	}
}

// TestReplaceTurnAPI: regenerate and edit through the API on both
// databases: the replaced messages are marked and kept, in order.
func TestReplaceTurnAPI(t *testing.T) {
	databases(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, nil)
		token := s.bootstrap("acme", "admin@acme.test")
		pid := s.do("POST", appAPI+"/project", token, map[string]any{"name": "P"}).json(t)["id"]
		tid := s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": pid, "title": "T"}).json(t)["id"].(string)
		url := appAPI + "/thread/" + tid + "/messages"
		for _, body := range []map[string]any{{"content": "one"}, {"replace": "last_answer"}, {"replace": "last_turn", "content": "one, edited"}} {
			if r := s.do("POST", url, token, body); r.status != 200 {
				t.Fatalf("turn %v: %d %s", body, r.status, r.body)
			}
		}
		var got []string
		for _, m := range s.do("GET", url, token, nil).json(t)["data"].([]any) {
			m := m.(map[string]any)
			got = append(got, fmt.Sprintf("%s:%v", m["role"], m["replaced"] == true))
		}
		if want := "user:true assistant:true assistant:true user:false assistant:false"; strings.Join(got, " ") != want {
			t.Errorf("stored: %s, want %s", strings.Join(got, " "), want)
		}
	})
}

package main

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"threadbox/e2e"
)

// TestE2ETimeTravel: in the chat each code card lists the files its call
// created, changed and deleted, shows their diff and reverts them; each
// answer offers Rewind here (the thread's files and history back to it)
// and Fork here (a new thread as it left them). At 1440 px in the light
// theme and at 375 px in the dark one, without horizontal overflow.
func TestE2ETimeTravel(t *testing.T) {
	e2e.NeedChromium(t)
	agent := needDocker(t)
	s := e2eServer(t, map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": agent, "MODEL_PROVIDER": "runner"})
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	pid := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Travel"}).json(t)["id"]
	const ws = "/home/agent/workspace"
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	for _, l := range []struct {
		width, height int
		scheme        string
	}{{1440, 1000, "light"}, {375, 812, "dark"}} {
		t.Run(fmt.Sprintf("%dpx-%s", l.width, l.scheme), func(t *testing.T) {
			tid := s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": pid, "title": "Travel " + l.scheme}).json(t)["id"].(string)
			for _, cmd := range []string{
				fmt.Sprintf("echo one > %s/a.txt", ws),
				fmt.Sprintf("echo two > %[1]s/a.txt; echo bee > %[1]s/b.txt", ws),
			} {
				r := s.do("POST", appAPI+"/thread/"+tid+"/messages", token, map[string]any{"content": "```bash\n" + cmd + "\n```", "pgpt": map[string]any{"tools": []any{"code_execution"}}})
				mustStatus(t, cmd, r, 200)
			}
			emulateScheme(t, b, l.scheme)
			b.SetViewport(l.width, l.height)
			b.Do("open the thread", chromedp.Navigate(s.base+"/#/"), chromedp.WaitVisible(chromedp.CSS(".home")),
				chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
			b.WaitTrue("each card's changes", `document.querySelectorAll('article.exec .call-changes').length === 2`, 15*time.Second)
			lists := e2e.Eval[string](b, "the change lists", `[...document.querySelectorAll('article.exec .change-list')].map(ul => [...ul.children].map(li => li.textContent.replace(/\s+/g, ' ').trim()).join('; ')).join(' | ')`)
			if lists != "created workspace/a.txt 4 B | changed workspace/a.txt 4 B → 4 B; created workspace/b.txt 4 B" {
				t.Errorf("change lists: %q", lists)
			}
			second := `document.querySelectorAll('article.exec')[1]`
			b.Do("open the second card's diff", chromedp.Evaluate[chromedp.Void](second+`.querySelector('.call-changes').open = true; `+second+`.querySelector('button.show-diff').click()`))
			diff := b.WaitText(`pre.diff`, "+two", 10*time.Second)
			if !strings.Contains(diff, "-one") {
				t.Errorf("the diff: %q", diff)
			}
			noHorizontalOverflow(t, b, l.width)
			shoot(t, b, fmt.Sprintf("timetravel-diff-%d-%s", l.width, l.scheme))

			// Revert the second call: a.txt back to one, b.txt gone.
			b.Do("revert the second call", chromedp.Evaluate[chromedp.Void](second+`.querySelector('button.revert').click()`))
			want := map[string]string{"workspace/a.txt": "one\n"}
			waitFiles(t, s, tid, want)

			// Rewind to the first answer: the second turn folded.
			b.Do("rewind to the first answer", chromedp.Evaluate[chromedp.Void](`document.querySelector('.messages > .msg.assistant button.rewind').click()`),
				chromedp.WaitVisible(chromedp.ID("dialog-ok")), chromedp.Click(chromedp.ID("dialog-ok")))
			b.WaitTrue("the later turn folded, one answer to rewind to", `!!document.querySelector('.replaced-group') && document.querySelectorAll('.messages:not(.replaced-list) > .msg').length === 2 && document.querySelectorAll('button.rewind').length === 1`, 15*time.Second)
			waitFiles(t, s, tid, want)
			noHorizontalOverflow(t, b, l.width)
			shoot(t, b, fmt.Sprintf("timetravel-rewound-%d-%s", l.width, l.scheme))

			// Fork at the first answer: a new thread with its files.
			b.Do("fork at the first answer", chromedp.Evaluate[chromedp.Void](`document.querySelector('.messages > .msg.assistant button.fork-here').click()`))
			b.WaitTrue("the fork opens", fmt.Sprintf(`location.hash.startsWith('#/thread/') && location.hash !== '#/thread/%s' && document.querySelectorAll('.messages > .msg').length === 2`, tid), 15*time.Second)
			loc := e2e.Run(b, "location", chromedp.Location())
			fork := loc[strings.Index(loc, "#/thread/")+len("#/thread/"):]
			waitFiles(t, s, fork, want)
		})
	}
}

// waitFiles waits until a thread's files on the host are want.
func waitFiles(t *testing.T, s *server, tid string, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := threadFiles(t, s, tid)
		if maps.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %s files %q, want %q", tid, got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

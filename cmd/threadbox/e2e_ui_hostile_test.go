package main

// Browser tests of the page as a user meets it at its limits: a window
// 280 px wide, and names and text that are long, or that look like markup.

import (
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

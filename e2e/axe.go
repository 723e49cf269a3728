package e2e

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/chromedp/chromedp"
)

// axeSource is axe-core, the accessibility checker, pinned and vendored
// by scripts/ui-vendor.sh (e2e/vendor/LICENSES.txt).
//
//go:embed vendor/axe.min.js
var axeSource string

// Violation is one rule axe-core found broken on a page, with the
// elements that break it.
type Violation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"` // each element's selector and what is wrong
}

func (v Violation) String() string {
	return fmt.Sprintf("%s (%s): %s\n\t%s", v.ID, v.Impact, v.Help, strings.Join(v.Nodes, "\n\t"))
}

// Axe runs axe-core's WCAG 2.x A and AA rules and its best practices on
// the page as it is now and returns the serious and critical violations.
// The checker is added through the DevTools protocol, which the page's
// CSP does not govern; the page itself loads nothing new.
func (b *Browser) Axe(what string) []Violation {
	b.t.Helper()
	if !Eval[bool](b, "axe-core in "+what, `typeof window.axe === 'object'`) {
		Run(b, "add axe-core to "+what, chromedp.Evaluate[chromedp.Void](axeSource))
	}
	raw := Eval[string](b, "axe-core on "+what, `axe.run(document, {
		runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] },
		resultTypes: ['violations'],
	}).then((r) => JSON.stringify(r.violations
		.filter((v) => v.impact === 'serious' || v.impact === 'critical')
		.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
			nodes: v.nodes.map((n) => n.target.join(' ') + ': ' + (n.failureSummary || '').replace(/\s+/g, ' ')) }))))`)
	var out []Violation
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		b.t.Fatalf("e2e: axe-core on %s: %v", what, err)
	}
	return out
}

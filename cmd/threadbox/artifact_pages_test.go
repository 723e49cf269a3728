package main

import (
	"fmt"
	"strings"
	"testing"
)

// manyOutputsScript is a chat message whose code writes n distinct files
// to outputs, numbered from start.
func manyOutputsScript(start, n int) string {
	return fmt.Sprintf("```python\nimport os\nos.makedirs('/mnt/user-data/outputs', exist_ok=True)\n"+
		"for i in range(%d, %d):\n    open('/mnt/user-data/outputs/f%%04d.txt' %% i, 'w').write('file %%d' %% i)\nprint('wrote')\n```", start, start+n)
}

// TestWorkspaceArtifactPagesAndCap: a tool call that writes 150 outputs in
// a Docker sandbox saves 100 as artifacts and says that 50 wait; the next
// call saves them. The project's artifacts list a page at a time, oldest or
// newest first, every artifact once; bad page parameters are refused with
// the error envelope, and another org finds nothing.
func TestWorkspaceArtifactPagesAndCap(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	f := newWSFixture(t, s)
	a := f.admin

	turn := func(content string) (resources int, notes []string) {
		t.Helper()
		r := s.do("POST", appAPI+"/thread/"+f.tid+"/messages", a, map[string]any{
			"content": content, "pgpt": map[string]any{"tools": []any{"code_execution"}},
		})
		if r.status != 200 {
			t.Fatalf("turn: %d %s", r.status, r.body)
		}
		for _, b := range r.json(t)["content"].([]any) {
			b := b.(map[string]any)
			switch {
			case b["type"] == "zylon-resource":
				resources++
			case b["type"] == "text" && strings.HasPrefix(b["text"].(string), "[threadbox]"):
				notes = append(notes, b["text"].(string))
			}
		}
		return resources, notes
	}
	list := func(query string) (ids []string, more bool, last string) {
		t.Helper()
		r := s.do("GET", appAPI+"/project/"+f.pid+"/artifacts"+query, a, nil)
		if r.status != 200 {
			t.Fatalf("artifacts%s: %d %s", query, r.status, r.body)
		}
		m := r.json(t)
		for _, x := range m["data"].([]any) {
			ids = append(ids, x.(map[string]any)["id"].(string))
		}
		last, _ = m["last_id"].(string)
		return ids, m["has_more"].(bool), last
	}
	all := func(query string, limit int) []string {
		t.Helper()
		var out []string
		after := ""
		for range 200 {
			q := fmt.Sprintf("?limit=%d%s", limit, query)
			if after != "" {
				q += "&after=" + after
			}
			ids, more, last := list(q)
			if len(ids) > limit || (more && len(ids) != limit) || (len(ids) > 0 && last != ids[len(ids)-1]) {
				t.Fatalf("page %s: %d ids, has_more %v, last_id %q", q, len(ids), more, last)
			}
			out = append(out, ids...)
			if !more {
				return out
			}
			after = last
		}
		t.Fatal("the pages never ended")
		return nil
	}

	n, notes := turn(manyOutputsScript(0, 150))
	if n != 100 || len(notes) != 1 || !strings.Contains(notes[0], "50 more new or changed files in /mnt/user-data/outputs/") {
		t.Fatalf("first call: %d artifacts announced, notes %q", n, notes)
	}
	if ids, more, _ := list("?limit=100"); len(ids) != 100 || more {
		t.Fatalf("after the first call: %d artifacts, has_more %v", len(ids), more)
	}
	if ids, more, _ := list(""); len(ids) != 20 || !more {
		t.Fatalf("the default page: %d, has_more %v", len(ids), more)
	}
	if n, notes := turn("```python\nprint('nothing new')\n```"); n != 50 || len(notes) != 0 {
		t.Fatalf("second call: %d artifacts announced, notes %q", n, notes)
	}
	oldest := all("", 33)
	newest := all("&order=desc", 100)
	if len(oldest) != 150 || len(newest) != 150 {
		t.Fatalf("pages gave %d oldest first and %d newest first, want 150", len(oldest), len(newest))
	}
	seen := map[string]bool{}
	for i, id := range oldest {
		if seen[id] || newest[len(newest)-1-i] != id {
			t.Fatalf("artifact %d (%s) repeated or out of order", i, id)
		}
		seen[id] = true
	}

	for _, q := range []string{"?limit=0", "?limit=101", "?limit=ten", "?order=sideways", "?after=art_unknown"} {
		if r := s.do("GET", appAPI+"/project/"+f.pid+"/artifacts"+q, a, nil); r.status != 400 || r.errorType(t) != "invalid_request_error" {
			t.Errorf("artifacts%s: %d %s", q, r.status, r.body)
		}
	}
	if r := s.do("GET", appAPI+"/project/"+f.pid+"/artifacts?after="+oldest[0], f.out, nil); r.status != 404 {
		t.Errorf("another org's listing: %d %s", r.status, r.body)
	}
}

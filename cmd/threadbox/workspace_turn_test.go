package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

type sseEvent struct {
	name string
	data map[string]any
}

func parseSSE(t *testing.T, body []byte) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data); err != nil {
				t.Fatalf("bad event data %q: %v", line, err)
			}
		case line == "" && cur.name != "":
			out = append(out, cur)
			cur = sseEvent{}
		}
	}
	return out
}

const pngScript = "```python\nimport os\nos.makedirs('/mnt/user-data/outputs', exist_ok=True)\n" +
	"open('/mnt/user-data/outputs/chart.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + b'%s' * 64)\nprint('saved')\n```"

// TestWorkspaceTurnArtifacts: a full turn with the offline runner model in
// a Docker sandbox writes a PNG to outputs; the stream carries a
// zylon-resource block right after the tool result, the artifact is
// downloadable (under downloads.generated), a second turn changing the file
// makes version 2, artifacts outlive the thread, and another org sees none
// of it.
func TestWorkspaceTurnArtifacts(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	f := newWSFixture(t, s)
	a, tid := f.admin, f.tid

	r := s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{
		"content": strings.Replace(pngScript, "%s", "one", 1), "stream": true, "pgpt": map[string]any{"tools": []any{"code_execution"}},
	})
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream turn: %d %s", r.status, r.body)
	}
	evs := parseSSE(t, r.body)
	if len(evs) == 0 || evs[0].name != "message_start" || evs[len(evs)-1].name != "message_stop" {
		t.Fatalf("stream shape: %s", r.body)
	}
	var types []string
	var resource map[string]any
	for _, ev := range evs {
		if ev.name != "content_block_start" {
			continue
		}
		if int(ev.data["index"].(float64)) != len(types) {
			t.Fatalf("block index %v out of order: %s", ev.data["index"], r.body)
		}
		b := ev.data["content_block"].(map[string]any)
		types = append(types, b["type"].(string))
		if b["type"] == "zylon-resource" {
			resource = b["resource"].(map[string]any)
		}
	}
	at := -1
	for i, typ := range types {
		if typ == "zylon-resource" {
			at = i
		}
	}
	if at < 1 || types[at-1] != "bash_code_execution_tool_result" || resource == nil {
		t.Fatalf("zylon-resource must follow the tool result: %v\n%s", types, r.body)
	}
	artID := resource["artifact_id"].(string)
	if resource["path"] != "/mnt/user-data/outputs/chart.png" || resource["name"] != "chart.png" || resource["mime_type"] != "image/png" ||
		resource["download_url"] != "/api/v1/app/artifact/"+artID+"/content" ||
		resource["preview_url"] != "/api/v1/app/artifact/"+artID+"/content?disposition=inline" || len(resource["sha256"].(string)) != 64 {
		t.Fatalf("resource: %v", resource)
	}
	want := "\x89PNG\r\n\x1a\n" + strings.Repeat("one", 64)
	dl := s.do("GET", resource["download_url"].(string), a, nil)
	if dl.status != 200 || string(dl.body) != want || dl.header.Get("Content-Type") != "image/png" {
		t.Fatalf("artifact download: %d %q %v", dl.status, dl.body, dl.header)
	}
	if pv := s.do("GET", resource["preview_url"].(string), a, nil); pv.status != 200 || !strings.HasPrefix(pv.header.Get("Content-Disposition"), "inline") {
		t.Fatalf("artifact preview: %d %v", pv.status, pv.header)
	}
	// The stored assistant message keeps the block and is complete.
	hist := f.history(t, a, tid)
	last := hist[len(hist)-1].(map[string]any)
	if last["complete"] != true || !strings.Contains(mustJSON(last["content"]), `"zylon-resource"`) {
		t.Fatalf("stored assistant message: %v", last)
	}

	// A second turn rewrites the file: version 2 of the same path.
	r = s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{
		"content": strings.Replace(pngScript, "%s", "two", 1), "pgpt": map[string]any{"tools": []any{"code_execution"}},
	})
	if r.status != 200 || !strings.Contains(string(r.body), `"zylon-resource"`) {
		t.Fatalf("second turn: %d %s", r.status, r.body)
	}
	// The runner's summary tells of the file written straight into outputs.
	if !strings.Contains(string(r.body), "Files saved to /mnt/user-data/outputs/: /mnt/user-data/outputs/chart.png") {
		t.Fatalf("the summary misses the output: %s", r.body)
	}
	list := s.do("GET", appAPI+"/project/"+f.pid+"/artifacts", a, nil).json(t)["data"].([]any)
	if len(list) != 2 {
		t.Fatalf("artifacts: %v", list)
	}
	v1, v2 := list[0].(map[string]any), list[1].(map[string]any)
	if v1["version"] != float64(1) || v2["version"] != float64(2) || v1["path"] != v2["path"] || v1["sha256"] == v2["sha256"] ||
		v2["thread_id"] != tid || !strings.HasPrefix(v2["tool_use_id"].(string), "srvtoolu_") {
		t.Fatalf("versions: %v", list)
	}
	if dl := s.do("GET", appAPI+"/artifact/"+v2["id"].(string)+"/content", a, nil); string(dl.body) != "\x89PNG\r\n\x1a\n"+strings.Repeat("two", 64) {
		t.Fatalf("version 2 content: %q", dl.body)
	}

	// Another org: not found; nothing changes.
	for _, p := range []string{"/artifact/" + artID, "/artifact/" + artID + "/content", "/project/" + f.pid + "/artifacts"} {
		if r := s.do("GET", appAPI+p, f.out, nil); r.status != 404 || r.errorType(t) != "not_found_error" {
			t.Errorf("GET %s by another org: %d %s", p, r.status, r.body)
		}
	}

	// downloads.generated gates artifact content, not its metadata.
	f.patchFeatures(t, map[string]any{"downloads": map[string]any{"generated": false}})
	if r := s.do("GET", appAPI+"/artifact/"+artID+"/content", a, nil); r.status != 403 || !strings.Contains(string(r.body), "downloads.generated") {
		t.Fatalf("artifact content with downloads off: %d %s", r.status, r.body)
	}
	if r := s.do("GET", appAPI+"/artifact/"+artID, a, nil); r.status != 200 {
		t.Fatalf("artifact metadata: %d", r.status)
	}
	f.patchFeatures(t, map[string]any{"downloads": map[string]any{"generated": true}})

	// A turn naming a skill gets code execution added and the skill
	// read-only at /mnt/skills/<name>/.
	arch := wsZip(t, wsEntry{name: "csv-report/SKILL.md", body: wsManifest("csv-report", "Summarise CSV files")})
	if r := s.do("POST", appAPI+"/skills", a, arch, "Content-Type", "application/zip"); r.status != 201 {
		t.Fatalf("upload skill: %d %s", r.status, r.body)
	}
	r = s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{
		"content": "```bash\ncat /mnt/skills/csv-report/SKILL.md\ntouch /mnt/skills/csv-report/x && echo WROTE || echo READONLY\n```",
		"skills":  []string{"csv-report"},
	})
	stdout := ""
	if r.status == 200 {
		for _, b := range r.json(t)["content"].([]any) {
			if b := b.(map[string]any); b["type"] == "bash_code_execution_tool_result" {
				stdout, _ = b["content"].(map[string]any)["stdout"].(string)
			}
		}
	}
	if !strings.Contains(stdout, "Summarise CSV files") || !strings.HasSuffix(stdout, "READONLY\n") {
		t.Fatalf("turn with a skill: %d %s", r.status, r.body)
	}

	// Artifacts outlive the thread.
	if r := s.do("DELETE", appAPI+"/thread/"+tid, a, nil); r.status != 204 {
		t.Fatalf("delete thread: %d %s", r.status, r.body)
	}
	if r := s.do("GET", appAPI+"/artifact/"+artID+"/content", a, nil); r.status != 200 || string(r.body) != want {
		t.Fatalf("artifact after the thread was deleted: %d", r.status)
	}
	if r := f.download(a, tid, "/mnt/user-data/outputs/chart.png"); r.status != 404 {
		t.Fatalf("deleted thread's file: %d", r.status)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestThreadTitleFromFirstMessage: a thread made without a title takes one
// from its first message (its first line, cut at a word); a title someone
// chose is kept, and later messages change nothing.
func TestThreadTitleFromFirstMessage(t *testing.T) {
	s := startServer(t, "", map[string]string{"MODEL_PROVIDER": "runner"})
	tok := s.bootstrap("acme", "admin@acme.test")
	pid := s.do("POST", appAPI+"/project", tok, map[string]any{"name": "P"}).json(t)["id"]
	title := func(tid string) string { return s.do("GET", appAPI+"/thread/"+tid, tok, nil).json(t)["title"].(string) }
	say := func(tid, text string) {
		if r := s.do("POST", appAPI+"/thread/"+tid+"/messages", tok, map[string]any{"content": text}); r.status != 200 {
			t.Fatalf("turn: %d %s", r.status, r.body)
		}
	}
	untitled := s.do("POST", appAPI+"/thread", tok, map[string]any{"project_id": pid}).json(t)["id"].(string)
	if got := title(untitled); got != "New thread" {
		t.Fatalf("a thread made without a title: %q", got)
	}
	say(untitled, "Plot monthly sales by region\nfrom the uploaded CSV")
	if got := title(untitled); got != "Plot monthly sales by region" {
		t.Fatalf("after the first message: %q", got)
	}
	say(untitled, "Now by quarter")
	if got := title(untitled); got != "Plot monthly sales by region" {
		t.Fatalf("a later message retitled it: %q", got)
	}
	named := s.do("POST", appAPI+"/thread", tok, map[string]any{"project_id": pid, "title": "Q3 numbers"}).json(t)["id"].(string)
	say(named, "Plot monthly sales by region")
	if got := title(named); got != "Q3 numbers" {
		t.Fatalf("a chosen title after the first message: %q", got)
	}
}

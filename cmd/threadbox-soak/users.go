package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// user is one simulated user: a member of the soak's org, with the
// threads, files and artifacts it made, kept in its ledger.
type user struct {
	n   int
	s   *soak
	c   *client
	rnd *mrand.Rand

	tokMu   sync.Mutex
	token   string
	tokenID string

	project   string
	led       *ledger
	sessions  int
	replState replState // repl.go
}

func (u *user) currentToken() string {
	u.tokMu.Lock()
	defer u.tokMu.Unlock()
	return u.token
}

// wrong is an answer with the right status and the wrong content.
type wrong struct{ msg string }

func (w *wrong) Error() string { return "wrong answer: " + w.msg }

func wrongf(format string, a ...any) error { return &wrong{fmt.Sprintf(format, a...)} }

// transportFailed reports whether err is a request that got no answer (the
// connection failed): not a wrong answer, but an error the run's
// classifier counts as designed during a fault and as an error otherwise.
func transportFailed(err error) bool {
	ae := asAPIError(err)
	return ae != nil && ae.Transport != nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// fileID is the file id of an absolute sandbox path.
func fileID(path string) string { return base64.RawURLEncoding.EncodeToString([]byte(path)) }

// setUp creates the user, logs it in, makes its API token and project.
func (u *user) setUp(ctx context.Context, admin *client) error {
	email := fmt.Sprintf("user%d@%s.test", u.n, u.s.srv.instance)
	pw := "soak-pass-" + randHex(4)
	if err := admin.json(ctx, "POST", "/api/v1/app/org/users", map[string]any{"email": email, "role": "member", "password": pw}, nil); err != nil {
		return fmt.Errorf("create user: %w", err)
	}
	var login struct{ Token string }
	if err := u.c.json(ctx, "POST", "/api/v1/app/auth/login", map[string]string{"email": email, "password": pw}, &login); err != nil {
		return fmt.Errorf("login: %w", err)
	}
	u.token = login.Token
	var tok struct{ ID, Token string }
	if err := u.c.json(ctx, "POST", "/api/v1/app/tokens", map[string]string{"name": "soak"}, &tok); err != nil {
		return fmt.Errorf("token: %w", err)
	}
	u.token, u.tokenID = tok.Token, tok.ID
	var p struct{ ID string }
	if err := u.c.json(ctx, "POST", "/api/v1/app/project", map[string]string{"name": fmt.Sprintf("soak %d", u.n)}, &p); err != nil {
		return fmt.Errorf("project: %w", err)
	}
	u.project = p.ID
	return nil
}

// op is one kind of operation with its weight in the mix.
type op struct {
	name   string
	weight int
	run    func(context.Context) error
}

func (u *user) ops() []op {
	ops := []op{
		{"turn", 6, func(ctx context.Context) error { return u.turn(ctx, false) }},
		{"turn-stream", 4, func(ctx context.Context) error { return u.turn(ctx, true) }},
		{"turn-skill", 2, u.skillTurn},
		{"messages", 3, func(ctx context.Context) error { return u.messages(ctx, false) }},
		{"messages-stream", 3, func(ctx context.Context) error { return u.messages(ctx, true) }},
		{"upload", 4, u.upload},
		{"put-file", 3, u.putFile},
		{"download", 5, u.download},
		{"delete-file", 2, u.deleteFile},
		{"artifacts", 2, u.artifacts},
		{"new-thread", 2, u.newThread},
		{"fork", 1, u.fork},
		{"delete-thread", 1, u.deleteThread},
		{"rotate-token", 1, u.rotateToken},
		// Detached turns: a client that leaves is an ordinary user.
		{"turn-disconnect", 1, u.turnDisconnect},
		// State in a sandbox's memory, read back across faults (repl.go).
		{"repl", 3, u.repl},
	}
	if u.s.cfg.chaos {
		ops = append(ops, op{"upload-disconnect", 1, u.uploadDisconnect})
	}
	if len(u.s.cfg.only) > 0 {
		var kept []op
		for _, o := range ops {
			if u.s.cfg.only[o.name] {
				kept = append(kept, o)
			}
		}
		ops = kept
	}
	return ops
}

// loop runs operations with think time until ctx ends.
func (u *user) loop(ctx context.Context) {
	ops := u.ops()
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	if total == 0 {
		return // -ops named none of this run's operations
	}
	for ctx.Err() == nil {
		k := u.rnd.IntN(total)
		var o op
		for _, o = range ops {
			if k < o.weight {
				break
			}
			k -= o.weight
		}
		start := time.Now()
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		err := o.run(octx)
		cancel()
		u.s.account(o.name, start, err)
		think := u.s.cfg.think/2 + time.Duration(u.rnd.Int64N(int64(u.s.cfg.think)+1))
		select {
		case <-ctx.Done():
		case <-time.After(think):
		}
	}
}

// errSkip marks an operation that found nothing to do.
var errSkip = errors.New("nothing to do")

// thread returns one of the user's live threads, making one when none.
func (u *user) thread(ctx context.Context) (*threadEntry, error) {
	live := u.led.liveThreads()
	if len(live) == 0 || (len(live) < 4 && u.rnd.IntN(10) == 0) {
		return u.makeThread(ctx)
	}
	return live[u.rnd.IntN(len(live))], nil
}

func (u *user) makeThread(ctx context.Context) (*threadEntry, error) {
	var t struct {
		ID        string `json:"id"`
		ProjectID string `json:"project_id"`
	}
	if err := u.c.json(ctx, "POST", "/api/v1/app/thread", map[string]string{"project_id": u.project, "title": "soak"}, &t); err != nil {
		return nil, err
	}
	if t.ID == "" || t.ProjectID != u.project {
		return nil, wrongf("created thread %+v in project %s", t, u.project)
	}
	return u.led.addThread(t.ID), nil
}

func (u *user) newThread(ctx context.Context) error {
	if len(u.led.liveThreads()) >= 6 {
		return errSkip
	}
	_, err := u.makeThread(ctx)
	return err
}

// turnBody is a chat turn that prints marker and writes an output file
// with content.
func turnBody(marker, name, content string, stream bool) map[string]any {
	script := fmt.Sprintf("echo %s\nprintf '%%s' '%s' > /mnt/user-data/outputs/%s", marker, content, name)
	return map[string]any{"content": "Run this:\n```bash\n" + script + "\n```", "pgpt": map[string]any{"tools": []any{"code_execution"}}, "stream": stream}
}

// found is what a turn's answer showed.
type found struct {
	stdouts   []string
	resources []resource
	texts     []string
	stopped   bool // message_stop seen (streams) or a complete JSON message
	errEvent  string
	// stoppedEvent is the stopped event that ends a stopped turn's log.
	stoppedEvent bool
	toolErrs     []string // error codes and explanations of tool error blocks
}

type resource struct {
	ArtifactID string `json:"artifact_id"`
	Path       string `json:"path"`
	SHA256     string `json:"sha256"`
	SizeBytes  int64  `json:"size_bytes"`
}

// walk collects the bash results, resources and texts anywhere in v.
func (f *found) walk(v any) {
	switch x := v.(type) {
	case map[string]any:
		switch x["type"] {
		case "bash_code_execution_tool_result_error", "text_editor_code_execution_tool_result_error":
			f.toolErrs = append(f.toolErrs, fmt.Sprint(x["error_code"], " ", x["detail"]))
		case "bash_code_execution_result":
			s, _ := x["stdout"].(string)
			f.stdouts = append(f.stdouts, s)
		case "zylon-resource":
			var r resource
			b, _ := json.Marshal(x["resource"])
			_ = json.Unmarshal(b, &r)
			f.resources = append(f.resources, r)
		case "text", "text_delta":
			s, _ := x["text"].(string)
			f.texts = append(f.texts, s)
		case "message_stop":
			f.stopped = true
		case "stopped":
			f.stoppedEvent = true
		case "error":
			if e, ok := x["error"].(map[string]any); ok {
				f.errEvent = fmt.Sprint(e["type"], ": ", e["message"])
			}
		case "message":
			if x["stop_reason"] != nil {
				f.stopped = true
			}
		}
		for _, c := range x {
			f.walk(c)
		}
	case []any:
		for _, c := range x {
			f.walk(c)
		}
	}
}

// parseAnswer reads a JSON answer or an SSE stream.
func parseAnswer(b []byte, stream bool) (*found, error) {
	f := &found{}
	if !stream {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, wrongf("answer is not JSON: %.200s", b)
		}
		f.walk(v)
		return f, nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			return nil, wrongf("stream event is not JSON: %.200s", data)
		}
		f.walk(v)
	}
	return f, nil
}

// codeOff is the runner's answer when the policy removed code execution.
const codeOff = "code execution is not enabled"

// turn runs a chat turn with code that prints a marker and writes an
// output, and checks the answer: the marker in the command's stdout, an
// artifact with the output's hash.
func (u *user) turn(ctx context.Context, stream bool) error {
	t, err := u.thread(ctx)
	if err != nil {
		return err
	}
	marker := "mk-" + randHex(6)
	content := "out-" + randHex(16)
	name := fmt.Sprintf("r%s.txt", randHex(3))
	if !t.turnMu.TryLock() {
		return errSkip
	}
	defer t.turnMu.Unlock()
	t.pending[name] = true // until the turn is acknowledged with it
	j, _ := json.Marshal(turnBody(marker, name, content, stream))
	start := time.Now()
	b, err := u.c.do(ctx, "POST", "/api/v1/app/thread/"+t.id+"/messages", bytes.NewReader(j), "application/json")
	if err != nil {
		return err
	}
	f, err := parseAnswer(b, stream)
	if err != nil {
		return err
	}
	if f.errEvent != "" {
		return &streamError{f.errEvent}
	}
	if !f.stopped {
		return wrongf("turn answer did not end (no message_stop / stop_reason): %.300s", b)
	}
	if len(f.stdouts) == 0 && strings.Contains(strings.Join(f.texts, ""), codeOff) && u.s.codeOffDuring(start, time.Now()) {
		u.led.turnAcked(t, marker, false)
		return errPolicyText
	}
	if len(f.stdouts) == 0 && len(f.toolErrs) > 0 {
		return &toolError{strings.Join(f.toolErrs, "; ")}
	}
	if len(f.stdouts) != 1 || f.stdouts[0] != marker+"\n" {
		return wrongf("turn stdout %q, want %q", f.stdouts, marker+"\n")
	}
	want := sha([]byte(content))
	var mine []resource
	for _, r := range f.resources {
		if strings.HasSuffix(r.Path, "/"+name) {
			mine = append(mine, r)
		}
	}
	if len(mine) == 0 {
		// Its output was not kept as an artifact (the server's disk was
		// full): it stays pending, for a later tool call to announce.
		return &notKept{name}
	}
	if len(mine) != 1 || mine[0].SHA256 != want || mine[0].ArtifactID == "" {
		return wrongf("turn resources %+v, want one for %s with sha256 %s", f.resources, name, want)
	}
	delete(t.pending, name)
	first := t.turns == 0
	t.turns++
	// Outputs an unacknowledged turn of this thread left are announced by
	// the next tool call that finds them: outputs/ is what the project's
	// artifacts are, announced late (designed).
	var unexplained []resource
	for _, r := range f.resources {
		if base := path.Base(r.Path); base != name {
			if t.pending[base] {
				delete(t.pending, base)
				continue
			}
			unexplained = append(unexplained, r)
		}
	}
	if len(unexplained) > 0 {
		// A fork's first turn announces the outputs the fork copied
		// as artifacts it made (reported as a finding).
		if !(t.fork && first) {
			return wrongf("turn resources %+v, want only the one for %s", f.resources, name)
		}
		u.s.finding(fmt.Sprintf("the first turn of a fork announced %d artifact(s) for outputs it did not write (copied by the fork)", len(unexplained)))
	}
	u.led.turnAcked(t, marker, true)
	u.led.addArtifact(artifactEntry{id: mine[0].ArtifactID, sha: want, project: u.project})
	return nil
}

// errPolicyText is a turn answered without code because the policy
// switched code execution off meanwhile: designed.
var errPolicyText = errors.New("answered without code: code execution switched off")

// notKept is a turn whose command ran but whose output no artifact
// announced.
type notKept struct{ name string }

func (e *notKept) Error() string { return "the turn announced no artifact for its output " + e.name }

// toolError is a turn whose command could not run (an error block).
type toolError struct{ msg string }

func (e *toolError) Error() string { return "the command could not run: " + e.msg }

// streamError is an error event inside a 200 stream.
type streamError struct{ msg string }

func (e *streamError) Error() string { return "error event in stream: " + e.msg }

// skillTurn runs a turn with the org's current skill and checks that the
// sandbox sees its SKILL.md.
func (u *user) skillTurn(ctx context.Context) error {
	name, marker := u.s.currentSkill()
	if name == "" {
		return errSkip
	}
	t, err := u.thread(ctx)
	if err != nil {
		return err
	}
	if !t.turnMu.TryLock() {
		return errSkip
	}
	defer t.turnMu.Unlock()
	body := map[string]any{"content": "```bash\ntail -n 1 /mnt/skills/" + name + "/SKILL.md\n```", "skills": []string{name}}
	start := time.Now()
	var f found
	var v any
	if err := u.c.json(ctx, "POST", "/api/v1/app/thread/"+t.id+"/messages", body, &v); err != nil {
		return err
	}
	f.walk(v)
	if len(f.stdouts) == 0 && strings.Contains(strings.Join(f.texts, ""), codeOff) && u.s.codeOffDuring(start, time.Now()) {
		return errPolicyText
	}
	if len(f.stdouts) == 0 && len(f.toolErrs) > 0 {
		return &toolError{strings.Join(f.toolErrs, "; ")}
	}
	if len(f.stdouts) != 1 || strings.TrimSpace(f.stdouts[0]) != marker {
		return wrongf("skill turn stdout %q, want %q", f.stdouts, marker)
	}
	return nil
}

// messages drives the Messages API through the official SDK: a command
// writes a file in a named container, a second request (when the session
// goes on) reads it back.
func (u *user) messages(ctx context.Context, stream bool) error {
	u.sessions++
	box := fmt.Sprintf("soak-u%d-s%d", u.n, u.sessions)
	cl := anthropic.NewClient(option.WithBaseURL(u.s.srv.base+"/api/gpt"), option.WithAuthToken(u.currentToken()),
		option.WithMaxRetries(0), option.WithRequestTimeout(2*time.Minute), option.WithHTTPClient(u.c.hc))
	marker := "msg-" + randHex(6)
	tools := []anthropic.ToolUnionParam{{OfCodeExecutionTool20250825: &anthropic.CodeExecutionTool20250825Param{}}}
	ask := func(script string) (string, error) {
		p := anthropic.MessageNewParams{Model: "default", MaxTokens: 1024, Tools: tools,
			Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("```bash\n" + script + "\n```"))},
			Container: anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(box)}}
		var msg anthropic.Message
		if stream {
			st := cl.Messages.NewStreaming(ctx, p)
			for st.Next() {
				if err := msg.Accumulate(st.Current()); err != nil {
					return "", wrongf("accumulate: %v", err)
				}
			}
			if err := st.Err(); err != nil {
				return "", sdkError(err)
			}
		} else {
			m, err := cl.Messages.New(ctx, p)
			if err != nil {
				return "", sdkError(err)
			}
			msg = *m
		}
		if msg.StopReason != anthropic.StopReasonEndTurn || msg.Container.ID != box {
			return "", wrongf("stop %q container %q", msg.StopReason, msg.Container.ID)
		}
		for _, b := range msg.Content {
			if b.Type == "bash_code_execution_tool_result" {
				c := b.AsBashCodeExecutionToolResult().Content
				if c.Type == "bash_code_execution_tool_result_error" {
					// The command could not run (its sandbox went away):
					// the chat's error block, as the Messages API has it.
					return "", &toolError{string(c.ErrorCode)}
				}
				return c.AsResponseBashCodeExecutionResultBlock().Stdout, nil
			}
		}
		return "", wrongf("no bash result in %d blocks", len(msg.Content))
	}
	out, err := ask("echo " + marker + " | tee note.txt")
	if err != nil {
		return err
	}
	if out != marker+"\n" {
		return wrongf("messages stdout %q, want %q", out, marker)
	}
	if out, err = ask("cat note.txt"); err != nil {
		return err
	}
	if out != marker+"\n" {
		return wrongf("container lost its file: cat note.txt = %q, want %q", out, marker)
	}
	return nil
}

// sdkError turns the SDK's error into an *apiError when it carries an
// answer.
func sdkError(err error) error {
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		if ae.StatusCode < 400 {
			// An error event inside a 200 stream.
			return &streamError{ae.Error()}
		}
		return parseError(ae.StatusCode, []byte(ae.RawJSON()))
	}
	if strings.Contains(err.Error(), "connection") || strings.Contains(err.Error(), "EOF") {
		return &apiError{Transport: err}
	}
	return &streamError{err.Error()}
}

func multipartBody(path string, content []byte) (io.Reader, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("path", path)
	fw, _ := mw.CreateFormFile("file", "blob.bin")
	_, _ = fw.Write(content)
	_ = mw.Close()
	return &buf, mw.FormDataContentType()
}

func randContent(r *mrand.Rand) []byte {
	b := make([]byte, 1+r.IntN(256<<10))
	_, _ = rand.Read(b)
	return b
}

// upload stores a file through the Files API, scoped to a thread.
func (u *user) upload(ctx context.Context) error {
	t, err := u.thread(ctx)
	if err != nil {
		return err
	}
	content := randContent(u.rnd)
	key := "data/up-" + randHex(4) + ".bin"
	body, ct := multipartBody(key, content)
	b, err := u.c.do(ctx, "POST", "/api/gpt/v1/files?scope_id="+t.id, body, ct)
	if err != nil {
		return err
	}
	var f struct {
		ID        string `json:"id"`
		SizeBytes int64  `json:"size_bytes"`
		Type      string `json:"type"`
	}
	path := "/mnt/user-data/uploads/" + key
	if json.Unmarshal(b, &f) != nil || f.ID != fileID(path) || f.SizeBytes != int64(len(content)) || f.Type != "file" {
		return wrongf("upload answered %.300s", b)
	}
	u.led.fileAcked(t, path, sha(content))
	return nil
}

// putFile stores a file through the thread's put-file.
func (u *user) putFile(ctx context.Context) error {
	t, err := u.thread(ctx)
	if err != nil {
		return err
	}
	content := randContent(u.rnd)
	key := "docs/put-" + randHex(4) + ".bin"
	if _, err := u.c.do(ctx, "PUT", "/api/v1/app/thread/"+t.id+"/put-file/"+key, bytes.NewReader(content), "application/octet-stream"); err != nil {
		return err
	}
	u.led.fileAcked(t, "/mnt/user-data/uploads/"+key, sha(content))
	return nil
}

// download reads back a file the ledger holds and checks its hash.
func (u *user) download(ctx context.Context) error {
	t, path, want := u.led.randomFile(u.rnd)
	if t == nil {
		return errSkip
	}
	var b []byte
	var err error
	if u.rnd.IntN(2) == 0 {
		b, err = u.c.do(ctx, "GET", "/api/v1/app/thread/"+t.id+"/download-file?path="+path, nil, "")
	} else {
		b, err = u.c.do(ctx, "GET", "/api/gpt/v1/files/"+fileID(path)+"/content?scope_id="+t.id, nil, "")
	}
	if err != nil {
		if ae := asAPIError(err); ae != nil && ae.Status == 404 && !u.led.hasFile(t, path) {
			return errSkip // deleted meanwhile by this user (not possible: users are sequential)
		}
		return err
	}
	if got := sha(b); got != want {
		return wrongf("download of %s: sha256 %s, want %s (%d bytes)", path, got, want, len(b))
	}
	return nil
}

// deleteFile deletes a file the ledger holds.
func (u *user) deleteFile(ctx context.Context) error {
	t, path, _ := u.led.randomFile(u.rnd)
	if t == nil {
		return errSkip
	}
	var d struct{ ID, Type string }
	if err := u.c.json(ctx, "DELETE", "/api/gpt/v1/files/"+fileID(path)+"?scope_id="+t.id, nil, &d); err != nil {
		return err
	}
	if d.Type != "file_deleted" || d.ID != fileID(path) {
		return wrongf("delete answered %+v", d)
	}
	u.led.fileDeleted(t, path)
	return nil
}

// artifacts lists the project's artifacts (every page), checks that the
// ledger's are there, and downloads one.
func (u *user) artifacts(ctx context.Context) error {
	have := map[string]string{}
	after := ""
	for {
		var page struct {
			Data    []struct{ ID, SHA256 string } `json:"data"`
			HasMore bool                          `json:"has_more"`
			LastID  string                        `json:"last_id"`
		}
		q := "/api/v1/app/project/" + u.project + "/artifacts?limit=100"
		if after != "" {
			q += "&after=" + url.QueryEscape(after)
		}
		if err := u.c.json(ctx, "GET", q, nil, &page); err != nil {
			return err
		}
		for _, a := range page.Data {
			if _, dup := have[a.ID]; dup {
				return wrongf("artifact %s listed twice across pages", a.ID)
			}
			have[a.ID] = a.SHA256
		}
		if !page.HasMore {
			break
		}
		if page.LastID == "" || page.LastID == after {
			return wrongf("artifact page after %q has more but no new last_id", after)
		}
		after = page.LastID
	}
	arts := u.led.artifactList()
	for _, a := range arts {
		if have[a.id] != a.sha {
			return wrongf("artifact %s missing from the project's list (sha %q, want %s)", a.id, have[a.id], a.sha)
		}
	}
	if len(arts) == 0 {
		return nil
	}
	a := arts[u.rnd.IntN(len(arts))]
	b, err := u.c.do(ctx, "GET", "/api/v1/app/artifact/"+a.id+"/content", nil, "")
	if err != nil {
		return err
	}
	if sha(b) != a.sha {
		return wrongf("artifact %s content sha %s, want %s", a.id, sha(b), a.sha)
	}
	return nil
}

// fork forks a thread; the fork must hold its complete messages and files.
func (u *user) fork(ctx context.Context) error {
	live := u.led.liveThreads()
	if len(live) == 0 || len(live) >= 6 {
		return errSkip
	}
	src := live[u.rnd.IntN(len(live))]
	if !src.turnMu.TryLock() {
		return errSkip
	}
	defer src.turnMu.Unlock()
	var t struct{ ID string }
	if err := u.c.json(ctx, "POST", "/api/v1/app/thread/"+src.id+"/fork", nil, &t); err != nil {
		return err
	}
	if t.ID == "" || t.ID == src.id {
		return wrongf("fork answered id %q", t.ID)
	}
	u.led.forked(src, t.ID)
	return nil
}

// deleteThread deletes a thread; it must answer 404 afterwards.
func (u *user) deleteThread(ctx context.Context) error {
	live := u.led.liveThreads()
	if len(live) < 2 {
		return errSkip
	}
	t := live[u.rnd.IntN(len(live))]
	if !t.turnMu.TryLock() {
		return errSkip
	}
	defer t.turnMu.Unlock()
	if _, err := u.c.do(ctx, "DELETE", "/api/v1/app/thread/"+t.id, nil, ""); err != nil {
		return err
	}
	u.led.threadDeleted(t)
	return nil
}

// rotateToken makes a new API token, switches to it and revokes the old
// one, which must be refused on the very next request.
func (u *user) rotateToken(ctx context.Context) error {
	var tok struct{ ID, Token string }
	if err := u.c.json(ctx, "POST", "/api/v1/app/tokens", map[string]string{"name": "soak-" + randHex(2)}, &tok); err != nil {
		return err
	}
	u.tokMu.Lock()
	old, oldID := u.token, u.tokenID
	u.token, u.tokenID = tok.Token, tok.ID
	u.tokMu.Unlock()
	if _, err := u.c.do(ctx, "DELETE", "/api/v1/app/tokens/"+oldID, nil, ""); err != nil {
		return fmt.Errorf("revoke %s with the new token %s: %w", oldID, tok.ID, err)
	}
	_, err := u.c.doToken(ctx, old, "GET", "/api/v1/app/me", nil, "")
	if transportFailed(err) {
		return err // the classifier tells a fault's from another
	}
	if ae := asAPIError(err); ae == nil || ae.Status != 401 || ae.Type != "authentication_error" {
		return wrongf("a revoked token was not refused: %v", err)
	}
	return nil
}

// turnDisconnect starts a streamed turn and leaves after its first bytes.
// Turns are detached: the turn goes on without its client. The user then
// does one of three things, chosen at random, and checks the outcome: it
// stops the turn (POST …/turns/{id}/stop; the log must end with a stopped
// event and the answer be stored as stopped), follows it again (GET
// …/turns/{id}/events; it must end complete with the command's marker,
// which the ledger then holds), or deletes the thread while the turn
// runs (the thread must be gone, and what the turn held is left to the
// end's resource checks). The thread's turn lock is held until the turn
// ended, so that the user's next turn there does not meet it running.
func (u *user) turnDisconnect(ctx context.Context) error {
	t, err := u.thread(ctx)
	if err != nil {
		return err
	}
	if !t.turnMu.TryLock() {
		return errSkip
	}
	defer t.turnMu.Unlock()
	marker := "gone-" + randHex(4)
	name := fmt.Sprintf("g%s.txt", randHex(3))
	content := "gone-out-" + randHex(8)
	t.pending[name] = true // until the turn is acknowledged with it
	j, _ := json.Marshal(turnBody(marker, name, content, true))
	// The command sleeps, so the client leaves while it runs.
	j = bytes.Replace(j, []byte(`echo gone-`), []byte(`sleep 3; echo gone-`), 1)
	start := time.Now()
	turnID, err := u.startAndLeave(ctx, t, j)
	if err != nil {
		return err
	}
	live := u.led.liveThreads()
	switch k := u.rnd.IntN(3); {
	case k == 2 && len(live) >= 2:
		return u.deleteWhileRunning(ctx, t, turnID)
	case k == 0:
		return u.stopLeftTurn(ctx, t, turnID)
	}
	// Follow it again from the start: it went on without its client.
	b, err := u.c.do(ctx, "GET", "/api/v1/app/thread/"+t.id+"/turns/"+turnID+"/events", nil, "")
	if err != nil {
		return err
	}
	f, err := parseAnswer(b, true)
	if err != nil {
		return err
	}
	if f.errEvent != "" {
		return &streamError{f.errEvent}
	}
	if f.stoppedEvent {
		return wrongf("a turn its client left was stopped: %.300s", b)
	}
	if !f.stopped {
		return wrongf("the events of a left turn did not end with message_stop: %.300s", b)
	}
	if len(f.stdouts) == 0 && strings.Contains(strings.Join(f.texts, ""), codeOff) && u.s.codeOffDuring(start, time.Now()) {
		return errPolicyText
	}
	if len(f.stdouts) == 0 && len(f.toolErrs) > 0 {
		return &toolError{strings.Join(f.toolErrs, "; ")}
	}
	if len(f.stdouts) != 1 || f.stdouts[0] != marker+"\n" {
		return wrongf("left turn stdout %q, want %q (did it go on without its client?)", f.stdouts, marker+"\n")
	}
	want := sha([]byte(content))
	for _, r := range f.resources {
		if strings.HasSuffix(r.Path, "/"+name) && r.SHA256 == want && r.ArtifactID != "" {
			delete(t.pending, name)
			t.turns++
			u.led.turnAcked(t, marker, true)
			u.led.addArtifact(artifactEntry{id: r.ArtifactID, sha: want, project: u.project})
			return nil
		}
	}
	return wrongf("left turn resources %+v, want one for %s with sha256 %s", f.resources, name, want)
}

// startAndLeave posts a streamed turn, reads its first bytes and leaves;
// it returns the turn's id from the Threadbox-Turn-Id header.
func (u *user) startAndLeave(ctx context.Context, t *threadEntry, body []byte) (string, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, "POST", u.s.srv.base+"/api/v1/app/thread/"+t.id+"/messages", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+u.currentToken())
	req.Header.Set("Content-Type", "application/json")
	resp, err := u.c.hc.Do(req)
	if err != nil {
		return "", &apiError{Transport: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return "", parseError(resp.StatusCode, b)
	}
	turnID := resp.Header.Get("Threadbox-Turn-Id")
	if turnID == "" {
		return "", wrongf("a turn's answer has no Threadbox-Turn-Id header")
	}
	buf := make([]byte, 64)
	_, _ = resp.Body.Read(buf)
	return turnID, nil
}

// stopLeftTurn stops a turn its client left; the turn must end stopped:
// its log ends with a stopped event, the stop answers it (again) as
// stopped, and its answer is stored as stopped, not running.
func (u *user) stopLeftTurn(ctx context.Context, t *threadEntry, turnID string) error {
	base := "/api/v1/app/thread/" + t.id + "/turns/" + turnID
	var tv struct{ Type, ID, State string }
	if err := u.c.json(ctx, "POST", base+"/stop", nil, &tv); err != nil {
		return err
	}
	if tv.Type != "turn" || tv.ID != turnID {
		return wrongf("stop answered %+v for turn %s", tv, turnID)
	}
	b, err := u.c.do(ctx, "GET", base+"/events", nil, "")
	if err != nil {
		return err
	}
	f, err := parseAnswer(b, true)
	if err != nil {
		return err
	}
	if f.errEvent != "" {
		return &streamError{f.errEvent}
	}
	if tv.State == "running" && !f.stoppedEvent {
		// The stop came while it ran (the command sleeps 3 s): it must
		// end stopped, whatever it did before.
		return wrongf("a stopped turn's events did not end with a stopped event: %.300s", tailOf(b, 300))
	}
	if err := u.c.json(ctx, "POST", base+"/stop", nil, &tv); err != nil {
		return err
	}
	// Its log ended: a second stop answers the turn as it ended.
	if tv.State == "running" || (f.stoppedEvent && tv.State != "stopped") {
		return wrongf("a second stop answered state %q after the log ended (stopped event: %v)", tv.State, f.stoppedEvent)
	}
	var ms struct {
		Data []struct {
			Role   string `json:"role"`
			Status string `json:"status"`
		} `json:"data"`
		RunningTurnID string `json:"running_turn_id"`
	}
	if err := u.c.json(ctx, "GET", "/api/v1/app/thread/"+t.id+"/messages", nil, &ms); err != nil {
		return err
	}
	if ms.RunningTurnID != "" {
		return wrongf("thread %s still names a running turn %s after its turn was stopped", t.id, ms.RunningTurnID)
	}
	if !f.stoppedEvent {
		return nil
	}
	// A stop cuts the answer, which is stored stopped, unless the answer
	// was whole first (its message_stop came before the stopped event: the
	// stop cut only what follows an answer, such as writing the title, as
	// when code execution is off and the answer is text alone); a whole
	// answer is stored complete.
	want := "stopped"
	if f.stopped {
		want = "complete"
	}
	if n := len(ms.Data); n == 0 || ms.Data[n-1].Role != "assistant" || ms.Data[n-1].Status != want {
		return wrongf("the stopped turn's answer is not stored as %s (message_stop seen: %v): %+v", want, f.stopped, ms.Data[max(n-1, 0):])
	}
	return nil
}

// deleteWhileRunning deletes a thread whose turn runs: the delete must be
// acknowledged, and the thread and its turn gone at once.
func (u *user) deleteWhileRunning(ctx context.Context, t *threadEntry, turnID string) error {
	if _, err := u.c.do(ctx, "DELETE", "/api/v1/app/thread/"+t.id, nil, ""); err != nil {
		return err
	}
	u.led.threadDeleted(t)
	_, err := u.c.do(ctx, "GET", "/api/v1/app/thread/"+t.id+"/turns/"+turnID+"/events", nil, "")
	if transportFailed(err) {
		return err // the classifier tells a fault's from another
	}
	if ae := asAPIError(err); ae == nil || ae.Status != 404 {
		return wrongf("the turn of a deleted thread answers %v, want 404", err)
	}
	return nil
}

func tailOf(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// uploadDisconnect starts an upload (with a Content-Length, or chunked)
// and drops it halfway: nothing of it may be stored.
func (u *user) uploadDisconnect(ctx context.Context) error {
	t, err := u.thread(ctx)
	if err != nil {
		return err
	}
	key := "docs/torn-" + randHex(4) + ".bin"
	path := "/api/v1/app/thread/" + t.id + "/put-file/" + key
	if u.rnd.IntN(2) == 0 {
		// Chunked, cut inside a chunk (written by hand: Go's client only
		// ever sends whole chunks). A body cut between chunks cannot be
		// told from a complete one by the server's HTTP stack (docs/reliability.md).
		if err := tornChunked(ctx, u.s.srv.base, path, u.currentToken()); err != nil {
			return err
		}
	} else {
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write(make([]byte, 256<<10))
			time.Sleep(200 * time.Millisecond)
			pw.CloseWithError(errors.New("client left"))
		}()
		req, _ := http.NewRequestWithContext(ctx, "PUT", u.s.srv.base+path, pr)
		req.ContentLength = 1 << 20
		req.Header.Set("Authorization", "Bearer "+u.currentToken())
		if resp, err := u.c.hc.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 300 {
				return wrongf("a torn upload was acknowledged: %d %.200s", resp.StatusCode, b)
			}
		}
	}
	time.Sleep(300 * time.Millisecond)
	_, err = u.c.do(ctx, "GET", "/api/gpt/v1/files/"+fileID("/mnt/user-data/uploads/"+key)+"?scope_id="+t.id, nil, "")
	if ae := asAPIError(err); ae != nil && ae.Status == 404 {
		return nil
	}
	if err == nil {
		return wrongf("a torn upload left a file at %s", key)
	}
	return err
}

// tornChunked sends a chunked PUT whose first chunk announces 1 MiB and
// carries 256 KiB, then closes the connection; an answer of 2xx, if one
// comes, is a torn upload acknowledged.
func tornChunked(ctx context.Context, base, path, token string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		return &apiError{Transport: err}
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: soak\r\nAuthorization: Bearer %s\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n", path, token, 1<<20)
	_, _ = conn.Write(make([]byte, 256<<10))
	time.Sleep(200 * time.Millisecond)
	_ = conn.(*net.TCPConn).CloseWrite()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, _ := io.ReadAll(conn)
	if bytes.HasPrefix(answer, []byte("HTTP/1.1 2")) {
		return wrongf("a torn chunked upload was acknowledged: %.200s", answer)
	}
	return nil
}

// deleteThreadAtLast deletes thread id, retrying while the server
// restarts; a retry after a delete whose answer was lost finds it gone.
func (u *user) deleteThreadAtLast(ctx context.Context, id string) error {
	return retry(ctx, func() error {
		_, err := u.c.do(ctx, "DELETE", "/api/v1/app/thread/"+id, nil, "")
		if ae, ok := err.(*apiError); ok && ae.Status == 404 {
			return nil
		}
		return err
	})
}

// deleteUnknownThreads deletes every thread the user's list holds, once
// the ledger's own are deleted: those a fork or a new thread made although
// a fault cut its answer. It returns how many it deleted, and fails when
// the list still holds a thread it deleted (a delete that did not take).
func (u *user) deleteUnknownThreads(ctx context.Context) (int, error) {
	deleted := map[string]bool{}
	for {
		var page struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := retry(ctx, func() error {
			return u.c.json(ctx, "GET", "/api/v1/app/thread?limit=100", nil, &page)
		}); err != nil {
			return len(deleted), err
		}
		if len(page.Data) == 0 {
			return len(deleted), nil
		}
		for _, t := range page.Data {
			if deleted[t.ID] {
				return len(deleted), wrongf("thread %s is still listed after its delete", t.ID)
			}
			if err := u.deleteThreadAtLast(ctx, t.ID); err != nil {
				return len(deleted), fmt.Errorf("delete thread %s: %w", t.ID, err)
			}
			deleted[t.ID] = true
		}
	}
}

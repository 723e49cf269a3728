package main

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"sync"
)

// ledger is what one user's acknowledged writes say must exist.
type ledger struct {
	mu        sync.Mutex
	threads   map[string]*threadEntry
	artifacts map[string]artifactEntry
}

// threadEntry is a thread the user made or forked.
type threadEntry struct {
	id      string
	turnMu  sync.Mutex        // one turn (or fork, or delete) at a time
	markers []string          // printed by acknowledged turns: must be in complete messages
	files   map[string]string // sandbox path → sha256 of acknowledged uploads
	gone    map[string]bool   // paths whose deletion was acknowledged
	deleted bool
	fork    bool // made by a fork
	turns   int  // acknowledged turns run in it by the soak
	// pending are the outputs of turns that did not end acknowledged (a
	// full disk, a fault): the next tool call that finds one in outputs/
	// announces it, late (guarded by turnMu).
	pending map[string]bool
}

// artifactEntry is an artifact an acknowledged turn announced.
type artifactEntry struct{ id, sha, project string }

func newLedger() *ledger {
	return &ledger{threads: map[string]*threadEntry{}, artifacts: map[string]artifactEntry{}}
}

func (l *ledger) addThread(id string) *threadEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := &threadEntry{id: id, files: map[string]string{}, gone: map[string]bool{}, pending: map[string]bool{}}
	l.threads[id] = t
	return t
}

func (l *ledger) liveThreads() []*threadEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*threadEntry
	for _, t := range l.threads {
		if !t.deleted {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (l *ledger) turnAcked(t *threadEntry, marker string, ran bool) {
	if !ran {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.markers = append(t.markers, marker)
}

func (l *ledger) addArtifact(a artifactEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.artifacts[a.id] = a
}

func (l *ledger) artifactList() []artifactEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]artifactEntry, 0, len(l.artifacts))
	for _, a := range l.artifacts {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (l *ledger) fileAcked(t *threadEntry, path, sum string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t.files[path] = sum
	delete(t.gone, path)
}

func (l *ledger) fileDeleted(t *threadEntry, path string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(t.files, path)
	t.gone[path] = true
}

func (l *ledger) hasFile(t *threadEntry, path string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := t.files[path]
	return ok
}

// randomFile picks one acknowledged file of a live thread.
func (l *ledger) randomFile(r *mrand.Rand) (*threadEntry, string, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	type f struct {
		t          *threadEntry
		path, hash string
	}
	var all []f
	ids := make([]string, 0, len(l.threads))
	for id := range l.threads {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		t := l.threads[id]
		if t.deleted {
			continue
		}
		paths := make([]string, 0, len(t.files))
		for p := range t.files {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			all = append(all, f{t, p, t.files[p]})
		}
	}
	if len(all) == 0 {
		return nil, "", ""
	}
	x := all[r.IntN(len(all))]
	return x.t, x.path, x.hash
}

// forked records a fork of src: it holds src's complete messages and files.
// The caller holds src.turnMu.
func (l *ledger) forked(src *threadEntry, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := &threadEntry{id: id, files: map[string]string{}, gone: map[string]bool{}, markers: append([]string(nil), src.markers...), fork: true, pending: map[string]bool{}}
	for p, h := range src.files {
		t.files[p] = h
	}
	// The fork copies src's outputs, those of its unacknowledged turns too
	// (the caller holds src.turnMu).
	for name := range src.pending {
		t.pending[name] = true
	}
	l.threads[id] = t
}

func (l *ledger) threadDeleted(t *threadEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t.deleted = true
}

// counts returns what the ledger holds: live threads, markers, files,
// artifacts.
func (l *ledger) counts() (threads, markers, files, artifacts int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.threads {
		if t.deleted {
			continue
		}
		threads++
		markers += len(t.markers)
		files += len(t.files)
	}
	return threads, markers, files, len(l.artifacts)
}

// verify checks the ledger against the API and returns every acknowledged
// write that is missing or changed (lost writes), and every turn still
// running.
func (l *ledger) verify(ctx context.Context, c *client) (lost, running []string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.threads {
		if t.deleted {
			_, err := c.do(ctx, "GET", "/api/v1/app/thread/"+t.id, nil, "")
			if ae := asAPIError(err); ae == nil || ae.Status != 404 {
				lost = append(lost, fmt.Sprintf("thread %s was deleted but answers %v", t.id, err))
			}
			continue
		}
		b, err := c.do(ctx, "GET", "/api/v1/app/thread/"+t.id+"/messages", nil, "")
		if err != nil {
			if ae := asAPIError(err); ae != nil && ae.Status == 404 {
				lost = append(lost, fmt.Sprintf("thread %s is gone", t.id))
				continue
			}
			return lost, running, fmt.Errorf("messages of %s: %w", t.id, err)
		}
		var ms struct {
			Data []struct {
				Role    string          `json:"role"`
				Status  string          `json:"status"`
				Content json.RawMessage `json:"content"`
			} `json:"data"`
		}
		if err := json.Unmarshal(b, &ms); err != nil {
			return lost, running, fmt.Errorf("messages of %s: %w", t.id, err)
		}
		var complete strings.Builder
		for _, m := range ms.Data {
			switch m.Status {
			case "complete":
				complete.Write(m.Content)
			case "running":
				running = append(running, t.id)
			case "failed", "stopped":
				// An interrupted answer: a turn that failed, or that its
				// owner stopped (turn-disconnect users do).
			default:
				lost = append(lost, fmt.Sprintf("thread %s: a message with status %q", t.id, m.Status))
			}
		}
		for _, mk := range t.markers {
			if !strings.Contains(complete.String(), mk) {
				lost = append(lost, fmt.Sprintf("thread %s: acknowledged turn %s not in its complete messages", t.id, mk))
			}
		}
		for p, want := range t.files {
			b, err := c.do(ctx, "GET", "/api/gpt/v1/files/"+fileID(p)+"/content?scope_id="+t.id, nil, "")
			switch {
			case err != nil:
				lost = append(lost, fmt.Sprintf("thread %s: file %s: %v", t.id, p, err))
			case sha(b) != want:
				lost = append(lost, fmt.Sprintf("thread %s: file %s has sha256 %s, want %s", t.id, p, sha(b), want))
			}
		}
		for p := range t.gone {
			_, err := c.do(ctx, "GET", "/api/gpt/v1/files/"+fileID(p)+"?scope_id="+t.id, nil, "")
			if ae := asAPIError(err); ae == nil || ae.Status != 404 {
				lost = append(lost, fmt.Sprintf("thread %s: deleted file %s answers %v", t.id, p, err))
			}
		}
	}
	for _, a := range l.artifacts {
		b, err := c.do(ctx, "GET", "/api/v1/app/artifact/"+a.id+"/content", nil, "")
		switch {
		case err != nil:
			lost = append(lost, fmt.Sprintf("artifact %s: %v", a.id, err))
		case sha(b) != a.sha:
			lost = append(lost, fmt.Sprintf("artifact %s has sha256 %s, want %s", a.id, sha(b), a.sha))
		}
	}
	sort.Strings(lost)
	return lost, running, nil
}

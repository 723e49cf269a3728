package workspace

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"

	"threadbox/domain/artifact"
	"threadbox/domain/fault"
	"threadbox/domain/project"
	"threadbox/domain/thread"
)

// memStore keeps projects, threads, their messages and artifacts in
// memory, by the rules the database keeps them: a message's seq is the
// thread's next, a deleted project takes its threads and their messages
// with it, a thread is its owner's.
type memStore struct {
	mu        sync.Mutex
	projects  map[string]project.Project
	threads   map[string]thread.Thread
	messages  map[string][]thread.Message // thread id → its messages by seq
	artifacts []artifact.Artifact         // in creation order
}

func newMemStore() *memStore {
	return &memStore{projects: map[string]project.Project{}, threads: map[string]thread.Thread{}, messages: map[string][]thread.Message{}}
}

var (
	errNoProject  = fault.New(fault.NotFound, "project not found")
	errNoThread   = fault.New(fault.NotFound, "thread not found")
	errNoMessage  = fault.New(fault.NotFound, "message not found")
	errNoArtifact = fault.New(fault.NotFound, "artifact not found")
)

func (m *memStore) CreateProject(_ context.Context, p project.Project) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.projects[p.ID()] = p
	return nil
}

func (m *memStore) Project(_ context.Context, orgID, id string) (project.Project, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.projects[id]; ok && p.OrgID() == orgID {
		return p, nil
	}
	return project.Project{}, errNoProject
}

func (m *memStore) ProjectsByOrg(_ context.Context, orgID string) ([]project.Project, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []project.Project
	for _, p := range m.projects {
		if p.OrgID() == orgID {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b project.Project) int {
		return cmp.Or(a.CreatedAt().Compare(b.CreatedAt()), strings.Compare(a.ID(), b.ID()))
	})
	return out, nil
}

func (m *memStore) UpdateProject(_ context.Context, p project.Project) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.projects[p.ID()]; !ok || old.OrgID() != p.OrgID() {
		return errNoProject
	}
	m.projects[p.ID()] = p
	return nil
}

func (m *memStore) DeleteProject(_ context.Context, orgID, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.projects[id]; !ok || p.OrgID() != orgID {
		return errNoProject
	}
	delete(m.projects, id)
	for tid, t := range m.threads {
		if t.ProjectID() == id {
			delete(m.threads, tid)
			delete(m.messages, tid)
		}
	}
	return nil
}

func (m *memStore) ProjectThreads(_ context.Context, orgID, projectID string) ([]thread.Thread, error) {
	return m.threadsWhere(func(t thread.Thread) bool { return t.OrgID() == orgID && t.ProjectID() == projectID }), nil
}

// threadsWhere returns the threads keep holds, newest first.
func (m *memStore) threadsWhere(keep func(thread.Thread) bool) []thread.Thread {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []thread.Thread
	for _, t := range m.threads {
		if keep(t) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b thread.Thread) int {
		return cmp.Or(b.CreatedAt().Compare(a.CreatedAt()), strings.Compare(b.ID(), a.ID()))
	})
	return out
}

func (m *memStore) CreateThread(_ context.Context, t thread.Thread) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.projects[t.ProjectID()]; !ok {
		return errNoProject
	}
	m.threads[t.ID()] = t
	return nil
}

func (m *memStore) Thread(_ context.Context, orgID, ownerID, id string) (thread.Thread, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.threads[id]; ok && t.OrgID() == orgID && t.OwnerID() == ownerID {
		return t, nil
	}
	return thread.Thread{}, errNoThread
}

func (m *memStore) OrgThread(_ context.Context, orgID, id string) (thread.Thread, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.threads[id]; ok && t.OrgID() == orgID {
		return t, nil
	}
	return thread.Thread{}, errNoThread
}

// FinishFork clears the owner's thread's fork mark.
func (m *memStore) FinishFork(_ context.Context, orgID, ownerID, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.threads[id]
	if !ok || t.OrgID() != orgID || t.OwnerID() != ownerID {
		return errNoThread
	}
	m.threads[id] = t.Forked()
	return nil
}

// UnfinishedForks returns the threads still marked as forks being made.
func (m *memStore) UnfinishedForks(context.Context) ([]thread.Thread, error) {
	return m.threadsWhere(thread.Thread.Forking), nil
}

// Threads lists the owner's threads newest first, those whose title or
// messages hold p.Query (case ignored) when it is set; a fork being made
// is not listed.
func (m *memStore) Threads(_ context.Context, orgID, ownerID, projectID string, p thread.Page) ([]thread.Thread, error) {
	q := strings.ToLower(p.Query)
	out := m.threadsWhere(func(t thread.Thread) bool {
		return t.OrgID() == orgID && t.OwnerID() == ownerID && (projectID == "" || t.ProjectID() == projectID) && !t.Forking()
	})
	out = slices.DeleteFunc(out, func(t thread.Thread) bool { return q != "" && !m.mentions(t, q) })
	if p.Before != "" {
		i := slices.IndexFunc(out, func(t thread.Thread) bool { return t.ID() == p.Before })
		if i < 0 {
			return nil, errNoThread
		}
		out = out[i+1:]
	}
	if p.Limit <= 0 {
		p.Limit = 20
	}
	return out[:min(len(out), p.Limit)], nil
}

// mentions reports whether the thread's title or messages hold q.
func (m *memStore) mentions(t thread.Thread, q string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if strings.Contains(strings.ToLower(t.Title()), q) {
		return true
	}
	return slices.ContainsFunc(m.messages[t.ID()], func(msg thread.Message) bool {
		return strings.Contains(strings.ToLower(string(msg.Content())), q)
	})
}

func (m *memStore) UpdateThread(_ context.Context, t thread.Thread) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.threads[t.ID()]; !ok || old.OrgID() != t.OrgID() || old.OwnerID() != t.OwnerID() {
		return errNoThread
	}
	m.threads[t.ID()] = t
	return nil
}

func (m *memStore) DeleteThread(_ context.Context, orgID, ownerID, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.threads[id]; !ok || t.OrgID() != orgID || t.OwnerID() != ownerID {
		return errNoThread
	}
	delete(m.threads, id)
	delete(m.messages, id)
	return nil
}

func (m *memStore) AppendMessage(_ context.Context, msg thread.Message) (thread.Message, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.threads[msg.ThreadID()]; !ok {
		return thread.Message{}, errNoThread
	}
	ms := m.messages[msg.ThreadID()]
	out := thread.RestoreMessage(msg.ID(), msg.ThreadID(), int64(len(ms))+1, msg.Role(), msg.Content(), msg.Usage(),
		msg.Complete(), msg.CreatedAt(), msg.Ended()).WithReplaced(msg.Replaced())
	m.messages[msg.ThreadID()] = append(ms, out)
	return out, nil
}

// UpdateMessage saves a message's content, usage, completeness and why
// its turn ended.
func (m *memStore) UpdateMessage(_ context.Context, msg thread.Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for tid, ms := range m.messages {
		for i, old := range ms {
			if old.ID() == msg.ID() {
				ms[i] = thread.RestoreMessage(old.ID(), tid, old.Seq(), old.Role(), msg.Content(), msg.Usage(),
					msg.Complete(), old.CreatedAt(), msg.Ended()).WithReplaced(old.Replaced())
				return nil
			}
		}
	}
	return errNoMessage
}

func (m *memStore) Messages(_ context.Context, threadID string) ([]thread.Message, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.messages[threadID]), nil
}

func (m *memStore) ReplaceMessages(_ context.Context, threadID string, ids []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ms := m.messages[threadID]
	for i, msg := range ms {
		if slices.Contains(ids, msg.ID()) {
			ms[i] = msg.WithReplaced(true)
		}
	}
	return nil
}

func (m *memStore) CreateArtifact(_ context.Context, a artifact.Artifact) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.artifacts = append(m.artifacts, a)
	return nil
}

// artifactWhere returns the last artifact keep holds.
func (m *memStore) artifactWhere(keep func(artifact.Artifact) bool) (artifact.Artifact, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range slices.Backward(m.artifacts) {
		if keep(a) {
			return a, nil
		}
	}
	return artifact.Artifact{}, errNoArtifact
}

func (m *memStore) Artifact(_ context.Context, orgID, id string) (artifact.Artifact, error) {
	return m.artifactWhere(func(a artifact.Artifact) bool { return a.OrgID == orgID && a.ID == id })
}

// ArtifactsByProject lists the project's artifacts oldest first, or
// newest first with p.NewestFirst, p.Limit of them after p.After.
func (m *memStore) ArtifactsByProject(_ context.Context, orgID, projectID string, p artifact.Page) ([]artifact.Artifact, error) {
	m.mu.Lock()
	var out []artifact.Artifact
	for _, a := range m.artifacts {
		if a.OrgID == orgID && a.ProjectID == projectID {
			out = append(out, a)
		}
	}
	m.mu.Unlock()
	if p.NewestFirst {
		slices.Reverse(out)
	}
	if p.After != "" {
		i := slices.IndexFunc(out, func(a artifact.Artifact) bool { return a.ID == p.After })
		if i < 0 {
			return nil, fault.Errorf(fault.Invalid, "after: %q is not an artifact of this project", p.After)
		}
		out = out[i+1:]
	}
	if p.Limit <= 0 {
		p.Limit = artifact.DefaultPage
	}
	return out[:min(len(out), p.Limit)], nil
}

// LatestArtifact returns the thread's artifact at path of the highest
// version.
func (m *memStore) LatestArtifact(_ context.Context, projectID, threadID, path string) (artifact.Artifact, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var best artifact.Artifact
	for _, a := range m.artifacts {
		if a.ProjectID == projectID && a.ThreadID == threadID && a.Path == path && a.Version > best.Version {
			best = a
		}
	}
	if best.ID == "" {
		return best, errNoArtifact
	}
	return best, nil
}

func (m *memStore) ArtifactWithContent(_ context.Context, projectID, path, sha256 string) (artifact.Artifact, error) {
	return m.artifactWhere(func(a artifact.Artifact) bool {
		return a.ProjectID == projectID && a.Path == path && a.SHA256 == sha256
	})
}

func (m *memStore) ProjectArtifactHashes(_ context.Context, orgID, projectID string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sums []string
	for _, a := range m.artifacts {
		if a.OrgID == orgID && a.ProjectID == projectID {
			sums = append(sums, a.SHA256)
		}
	}
	slices.Sort(sums)
	return slices.Compact(sums), nil
}

func (m *memStore) ReferencedArtifactHashes(_ context.Context, sums []string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, s := range sums {
		if slices.ContainsFunc(m.artifacts, func(a artifact.Artifact) bool { return a.SHA256 == s }) {
			out = append(out, s)
		}
	}
	return out, nil
}

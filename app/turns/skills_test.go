package turns

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"threadbox/app/messages/wire"
	"threadbox/domain/container"
	"threadbox/domain/skill"
	"threadbox/domain/user"
)

// skillFolders keeps each container's skills folder in memory, as the
// skill store keeps it on disk, and counts how often a turn had it
// written or looked at.
type skillFolders struct {
	held  map[string][]string // by container storage id
	uses  int
	cutAt int // > 0: the next load stops after this many skills and fails
}

func (f *skillFolders) Resolve(_ context.Context, orgID string, refs []wire.SkillParam) ([]skill.Skill, error) {
	out := make([]skill.Skill, len(refs))
	for i, r := range refs {
		out[i] = skill.Skill{OrgID: orgID, Name: r.SkillID, Version: 1}
	}
	return out, nil
}

func (f *skillFolders) Load(_ context.Context, containerID string, sk []skill.Skill) error {
	f.uses++
	var names []string
	for _, s := range sk {
		if f.cutAt > 0 && len(names) == f.cutAt {
			f.cutAt = 0
			f.held[containerID] = names
			return errors.New("load cut short")
		}
		names = append(names, s.Name)
	}
	f.held[containerID] = names
	return nil
}

// markedContainers records the skills mark of one container.
type markedContainers struct {
	recordingContainers
	c container.Container
}

func (m *markedContainers) MarkSkills(_ context.Context, c container.Container, may bool) (container.Container, error) {
	m.c = m.c.WithSkills(may)
	return m.c, nil
}

// TestLoadSkills: every turn's container holds exactly the skills the
// turn asks for — a turn without skills unloads those of an earlier turn,
// and those of a load cut short — and a turn that asks for none of a
// container whose record says its folder is empty neither writes the
// folder nor looks at it.
func TestLoadSkills(t *testing.T) {
	p := user.Principal{OrgID: "org_1", UserID: "usr_1", Kind: user.APIToken}
	c, err := container.NewForUser(p.OrgID, p.UserID, "work", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	folders := &skillFolders{held: map[string][]string{}}
	cs := &markedContainers{c: c}
	s := New(Deps{Containers: cs, Skills: folders})
	steps := []struct {
		name     string
		skills   []string
		cutAt    int
		wantErr  bool
		wantHeld []string
		wantUse  bool
	}{
		{name: "a new container, no skills", wantUse: false},
		{name: "one skill", skills: []string{"pdf"}, wantHeld: []string{"pdf"}, wantUse: true},
		{name: "no skills after one", wantUse: true},
		{name: "no skills again", wantUse: false},
		{name: "two skills, the load cut after one", skills: []string{"pdf", "xlsx"}, cutAt: 1, wantErr: true, wantHeld: []string{"pdf"}, wantUse: true},
		{name: "no skills after the cut load", wantUse: true},
		{name: "no skills once more", wantUse: false},
		{name: "two skills", skills: []string{"pdf", "xlsx"}, wantHeld: []string{"pdf", "xlsx"}, wantUse: true},
		{name: "another skill", skills: []string{"docx"}, wantHeld: []string{"docx"}, wantUse: true},
	}
	for _, st := range steps {
		var refs []wire.SkillParam
		for _, name := range st.skills {
			refs = append(refs, wire.SkillParam{Type: "custom", SkillID: name})
		}
		req := &wire.Request{Container: &wire.ContainerParam{ID: "work", Skills: refs}}
		folders.cutAt = st.cutAt
		uses := folders.uses
		err := s.loadSkills(context.Background(), p, cs.c, req, true)
		if (err != nil) != st.wantErr {
			t.Fatalf("%s: err %v, want one: %v", st.name, err, st.wantErr)
		}
		if got := folders.held[c.ID()]; !slices.Equal(got, st.wantHeld) {
			t.Fatalf("%s: the folder holds %q, want %q", st.name, got, st.wantHeld)
		}
		if used := folders.uses > uses; used != st.wantUse {
			t.Fatalf("%s: the folder used %v, want %v", st.name, used, st.wantUse)
		}
		if len(folders.held[c.ID()]) > 0 && !cs.c.MayHoldSkills() {
			t.Fatalf("%s: the folder holds skills and the record says it is empty", st.name)
		}
	}
}

// gatedContainers records one container's skills mark, and holds a turn
// that clears it until the test lets it go.
type gatedContainers struct {
	recordingContainers
	mu       sync.Mutex
	may      bool
	clearing chan struct{} // closed when a turn starts clearing the mark
	clear    chan struct{} // closed by the test: the clearing goes on
}

func (g *gatedContainers) MarkSkills(_ context.Context, c container.Container, may bool) (container.Container, error) {
	if !may {
		close(g.clearing)
		<-g.clear
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.may = may
	return c.WithSkills(may), nil
}

// syncFolders is skillFolders safe for turns side by side.
type syncFolders struct {
	mu sync.Mutex
	skillFolders
}

func (f *syncFolders) Load(ctx context.Context, containerID string, sk []skill.Skill) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.skillFolders.Load(ctx, containerID, sk)
}

// gatedSkills is a service whose container may hold skills and holds the
// skill "old", and whose emptying of a skills folder waits at cs's gate.
func gatedSkills(t *testing.T) (user.Principal, container.Container, *syncFolders, *gatedContainers, *Service) {
	t.Helper()
	p := user.Principal{OrgID: "org_1", UserID: "usr_1", Kind: user.APIToken}
	c, err := container.NewForUser(p.OrgID, p.UserID, "work", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c = c.WithSkills(true)
	folders := &syncFolders{skillFolders: skillFolders{held: map[string][]string{c.ID(): {"old"}}}}
	cs := &gatedContainers{may: true, clearing: make(chan struct{}), clear: make(chan struct{})}
	s := New(Deps{Containers: cs, Skills: folders})
	return p, c, folders, cs, s
}

// TestLoadSkillsSideBySide: while a turn without skills empties a
// container's folder and is about to record it empty, a turn that asks
// for a skill waits, and then loads it and records it: the folder and the
// record agree. (Interleaved, the record said empty over a folder holding
// the skill, and no later turn would have emptied it.)
func TestLoadSkillsSideBySide(t *testing.T) {
	p, c, folders, cs, s := gatedSkills(t)
	turn := func(skills ...string) <-chan error {
		var refs []wire.SkillParam
		for _, name := range skills {
			refs = append(refs, wire.SkillParam{Type: "custom", SkillID: name})
		}
		done := make(chan error, 1)
		go func() {
			done <- s.loadSkills(context.Background(), p, c, &wire.Request{Container: &wire.ContainerParam{ID: "work", Skills: refs}}, true)
		}()
		return done
	}
	without := turn()
	<-cs.clearing
	with := turn("pdf")
	// The turn with the skill has time to run through; it must not.
	var withErr error
	select {
	case withErr = <-with:
		t.Errorf("the turn with a skill loaded it (%v) while the other emptied the folder", withErr)
		with = nil
	case <-time.After(300 * time.Millisecond):
	}
	close(cs.clear)
	if err := <-without; err != nil {
		t.Fatal(err)
	}
	if with != nil {
		withErr = <-with
	}
	if withErr != nil {
		t.Fatal(withErr)
	}
	folders.mu.Lock()
	held := folders.held[c.ID()]
	folders.mu.Unlock()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if !slices.Equal(held, []string{"pdf"}) || !cs.may {
		t.Errorf("the folder holds %q and the record says it may hold skills: %v; want [pdf], true", held, cs.may)
	}
}

// TestStoppedTurnDoesNotWaitForAnotherSkillsLoad: a turn whose context
// ends while another turn loads or unloads the same container's skills
// (which may wait for the container's sandbox to boot) gives up waiting
// with the end of its context, touching neither the folder nor the
// record; the other turn goes on.
func TestStoppedTurnDoesNotWaitForAnotherSkillsLoad(t *testing.T) {
	p, c, folders, cs, s := gatedSkills(t)
	without := make(chan error, 1)
	go func() {
		without <- s.loadSkills(context.Background(), p, c, &wire.Request{Container: &wire.ContainerParam{ID: "work"}}, true)
	}()
	<-cs.clearing
	ctx, stop := context.WithCancel(context.Background())
	stop()
	refs := []wire.SkillParam{{Type: "custom", SkillID: "pdf"}}
	var let atomic.Bool
	type ended struct {
		err  error
		held bool // the other turn still held the folder
	}
	stopped := make(chan ended, 1)
	go func() {
		err := s.loadSkills(ctx, p, c, &wire.Request{Container: &wire.ContainerParam{ID: "work", Skills: refs}}, true)
		stopped <- ended{err, !let.Load()}
	}()
	// The other turn is let go once the stopped one returned, or long
	// after: one that waits for it returns only then, which held tells.
	var got ended
	select {
	case got = <-stopped:
	case <-time.After(30 * time.Second):
		let.Store(true)
		close(cs.clear)
		got = <-stopped
	}
	if !got.held || !errors.Is(got.err, context.Canceled) {
		t.Errorf("a stopped turn's load while another held the folder: returned while it held it %v, error %v; want it to return then with the end of its context", got.held, got.err)
	}
	if !let.Load() {
		close(cs.clear)
	}
	if err := <-without; err != nil {
		t.Fatal(err)
	}
	folders.mu.Lock()
	held := folders.held[c.ID()]
	folders.mu.Unlock()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(held) != 0 || cs.may {
		t.Errorf("the folder holds %q and the record says it may hold skills: %v; want the other turn's empty folder", held, cs.may)
	}
}

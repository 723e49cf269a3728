package turns

import (
	"context"
	"errors"
	"slices"
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

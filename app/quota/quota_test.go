package quota

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/org"
)

// fakeStore answers the counts from fields; calls records which ran.
type fakeStore struct {
	running    map[string]int64 // by user id, "" for the org
	containers map[string]int64 // by user id
	ids        []string
	artifacts  int64
	messages   int64
	turnLogs   int64
	skills     int64
	ckpts      int64
	states     map[string]container.State
	err        error
	calls      []string
	reserved   []string // containers ReserveRunning recorded
}

func (f *fakeStore) RunningSandboxes(_ context.Context, orgID, userID string) (int64, error) {
	f.calls = append(f.calls, "running:"+userID)
	return f.running[userID], f.err
}

func (f *fakeStore) UserContainers(_ context.Context, orgID, userID string) (int64, error) {
	f.calls = append(f.calls, "containers:"+userID)
	return f.containers[userID], f.err
}

func (f *fakeStore) OrgContainerIDs(context.Context, string) ([]string, error) {
	f.calls = append(f.calls, "ids")
	return f.ids, f.err
}

func (f *fakeStore) ArtifactBytes(context.Context, string) (int64, error) {
	f.calls = append(f.calls, "artifacts")
	return f.artifacts, f.err
}

func (f *fakeStore) MessageBytes(context.Context, string) (int64, error) {
	f.calls = append(f.calls, "messages")
	return f.messages, f.err
}

func (f *fakeStore) TurnLogBytes(context.Context, string) (int64, error) {
	f.calls = append(f.calls, "turn logs")
	return f.turnLogs, f.err
}

func (f *fakeStore) RetainedFileBytes(context.Context, string) (int64, error) { return 0, nil }

func (f *fakeStore) SnapshotBytes(context.Context, string) (int64, error) { return 0, nil }

func (f *fakeStore) SkillBytes(context.Context, string) (int64, error) {
	f.calls = append(f.calls, "skills")
	return f.skills, f.err
}

func (f *fakeStore) CheckpointBytes(context.Context, string) (int64, error) {
	f.calls = append(f.calls, "checkpoints")
	return f.ckpts, f.err
}

func (f *fakeStore) Container(_ context.Context, id string) (container.Container, error) {
	f.calls = append(f.calls, "container:"+id)
	st, ok := f.states[id]
	if !ok {
		return container.Container{}, fault.New(fault.NotFound, "container not found")
	}
	return container.Restore(id, "x", "org_1", "usr_1", "", st, "", "", time.Time{}, time.Time{}), nil
}

// ReserveRunning admits with the running counts and records c when admitted.
func (f *fakeStore) ReserveRunning(_ context.Context, c container.Container, admit func(user, org int64) error) error {
	f.calls = append(f.calls, "reserve:"+c.ID())
	if f.err != nil {
		return f.err
	}
	if err := admit(f.running[c.OwnerID()], f.running[""]); err != nil {
		return err
	}
	f.reserved = append(f.reserved, c.ID())
	return nil
}

type fakeDisks map[string]int64

func (d fakeDisks) Usage(_ context.Context, id string) (int64, error) {
	if n, ok := d[id]; ok {
		return n, nil
	}
	return 0, errors.New("no such folder")
}

type fakePolicies struct {
	q   map[org.Quota]int64
	err error
}

func (p fakePolicies) OrgPolicy(context.Context, string) (org.Policy, error) {
	q, err := org.NewQuotas(p.q)
	if err != nil {
		panic(err)
	}
	return org.DefaultPolicy().WithQuotas(q), p.err
}

// want is a check's expected outcome: admitted when kind is "".
type want struct {
	kind     fault.Kind
	contains string
}

func (w want) check(t *testing.T, err error) {
	t.Helper()
	if w.kind == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	if err == nil || fault.KindOf(err) != w.kind || !strings.Contains(fault.MessageOf(err), w.contains) {
		t.Fatalf("got %v, want %s containing %q", err, w.kind, w.contains)
	}
}

func TestBeforeCreate(t *testing.T) {
	cases := []struct {
		name   string
		quotas map[org.Quota]int64
		store  fakeStore
		want   want
		calls  int // store calls
	}{
		{"unlimited counts nothing", nil, fakeStore{containers: map[string]int64{"usr_1": 99}}, want{}, 0},
		{"below the quota", map[org.Quota]int64{org.ContainersPerUser: 2}, fakeStore{containers: map[string]int64{"usr_1": 1}}, want{}, 1},
		{"at the quota", map[org.Quota]int64{org.ContainersPerUser: 2}, fakeStore{containers: map[string]int64{"usr_1": 2}},
			want{fault.Forbidden, `quota "containersPerUser" reached: your organization allows 2 containers per user and you have 2`}, 1},
		{"other users' containers do not count", map[org.Quota]int64{org.ContainersPerUser: 1}, fakeStore{containers: map[string]int64{"usr_2": 5}}, want{}, 1},
		{"running quotas do not apply", map[org.Quota]int64{org.RunningSandboxesPerUser: 1}, fakeStore{running: map[string]int64{"usr_1": 3}}, want{}, 0},
		{"a failing count fails", map[org.Quota]int64{org.ContainersPerUser: 1}, fakeStore{err: errors.New("db down")}, want{fault.Internal, ""}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.store
			err := New(&st, &st, nil, fakePolicies{q: tc.quotas}).BeforeCreate(context.Background(), "org_1", "usr_1")
			tc.want.check(t, err)
			if len(st.calls) != tc.calls {
				t.Fatalf("store calls %v, want %d", st.calls, tc.calls)
			}
		})
	}
}

func TestBeforeBootAndBeforeRun(t *testing.T) {
	perUser := want{fault.RateLimited, `quota "runningSandboxesPerUser" reached: your organization allows 1 running sandbox per user and you have 1 running`}
	perOrg := want{fault.RateLimited, `quota "runningSandboxesPerOrg" reached: your organization allows 3 running sandboxes and 3 are running`}
	cases := []struct {
		name      string
		quotas    map[org.Quota]int64
		running   map[string]int64
		container string // BeforeRun's container
		states    map[string]container.State
		boot, run want
	}{
		{"unlimited", nil, map[string]int64{"usr_1": 50, "": 500}, "", nil, want{}, want{}},
		{"below both", map[org.Quota]int64{org.RunningSandboxesPerUser: 2, org.RunningSandboxesPerOrg: 3}, map[string]int64{"usr_1": 1, "": 2}, "", nil, want{}, want{}},
		{"user at the quota", map[org.Quota]int64{org.RunningSandboxesPerUser: 1}, map[string]int64{"usr_1": 1, "": 1}, "", nil, perUser, perUser},
		{"org at the quota", map[org.Quota]int64{org.RunningSandboxesPerUser: 2, org.RunningSandboxesPerOrg: 3}, map[string]int64{"usr_1": 0, "": 3}, "", nil, perOrg, perOrg},
		{"the user's quota is named first", map[org.Quota]int64{org.RunningSandboxesPerUser: 1, org.RunningSandboxesPerOrg: 3}, map[string]int64{"usr_1": 1, "": 3}, "", nil, perUser, perUser},
		{"a request to a running sandbox is not refused", map[org.Quota]int64{org.RunningSandboxesPerUser: 1}, map[string]int64{"usr_1": 1}, "usr_1--a",
			map[string]container.State{"usr_1--a": container.Running}, perUser, want{}},
		{"a request to an idle container is", map[org.Quota]int64{org.RunningSandboxesPerUser: 1}, map[string]int64{"usr_1": 1}, "usr_1--b",
			map[string]container.State{"usr_1--a": container.Running, "usr_1--b": container.Idle}, perUser, perUser},
		{"so is one to a container not made yet", map[org.Quota]int64{org.RunningSandboxesPerUser: 1}, map[string]int64{"usr_1": 1}, "usr_1--new",
			map[string]container.State{"usr_1--a": container.Running}, perUser, perUser},
		{"the containers quota does not apply", map[org.Quota]int64{org.ContainersPerUser: 1}, map[string]int64{"usr_1": 9}, "", nil, want{}, want{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &fakeStore{running: tc.running, states: tc.states}
			s := New(st, st, nil, fakePolicies{q: tc.quotas})
			tc.boot.check(t, s.BeforeBoot(context.Background(), "org_1", "usr_1"))
			tc.run.check(t, s.BeforeRun(context.Background(), "org_1", "usr_1", tc.container))
			// Reserve admits as BeforeBoot counts, and records the
			// container only when a running quota is set and admits it.
			booting := container.Restore("usr_1--c", "c", "org_1", "usr_1", "", container.Running, "", "h", time.Time{}, time.Time{})
			err := s.Reserve(context.Background(), booting)
			tc.boot.check(t, err)
			limited := tc.quotas[org.RunningSandboxesPerUser]+tc.quotas[org.RunningSandboxesPerOrg] > 0
			if wantRec := err == nil && limited; (len(st.reserved) == 1) != wantRec {
				t.Fatalf("reserved %v, want a record: %v", st.reserved, wantRec)
			}
		})
	}
	t.Run("policy errors are returned", func(t *testing.T) {
		s := New(&fakeStore{}, &fakeStore{}, nil, fakePolicies{err: fault.New(fault.NotFound, "org not found")})
		if err := s.BeforeBoot(context.Background(), "org_1", "usr_1"); !fault.Is(err, fault.NotFound) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestStorage(t *testing.T) {
	// The org stores 120 bytes of artifacts, 50 of messages, 30 of turn
	// logs, 20 of skills, 80 of sandbox checkpoints and 700 in two
	// containers.
	store := func() *fakeStore {
		return &fakeStore{artifacts: 120, messages: 50, turnLogs: 30, skills: 20, ckpts: 80, ids: []string{"c1", "c2"}}
	}
	disks := fakeDisks{"c1": 500, "c2": 200}
	cases := []struct {
		name   string
		quotas map[org.Quota]int64
		disks  Disks
		n      int64 // BeforeStore's bytes
		left   int64
		leftW  want
		store  want
	}{
		{"unlimited", nil, disks, 1 << 40, -1, want{}, want{}},
		{"room left", map[org.Quota]int64{org.StorageBytesPerOrg: 1500}, disks, 500, 500, want{}, want{}},
		{"too much for what is left", map[org.Quota]int64{org.StorageBytesPerOrg: 1500}, disks, 501, 500, want{},
			want{fault.TooLarge, `quota "storageBytesPerOrg" exceeded: your organization may store 1500 bytes (container files, sandbox checkpoints, artifacts, skills, messages and turn logs), 1000 are in use and 501 more bytes do not fit in the 500 left`}},
		{"full", map[org.Quota]int64{org.StorageBytesPerOrg: 1000}, disks, 1, 0,
			want{fault.TooLarge, `quota "storageBytesPerOrg" exceeded: your organization may store 1000 bytes (container files, sandbox checkpoints, artifacts, skills, messages and turn logs), 1000 are in use and nothing more fits`},
			want{fault.TooLarge, `1 more bytes do not fit in the 0 left`}},
		{"nothing more to store when full", map[org.Quota]int64{org.StorageBytesPerOrg: 1000}, disks, 0, 0,
			want{fault.TooLarge, "1000 are in use and nothing more fits"}, want{fault.TooLarge, "1000 are in use and nothing more fits"}},
		{"nothing more to store with room", map[org.Quota]int64{org.StorageBytesPerOrg: 1001}, disks, 0, 1, want{}, want{}},
		{"without disks the records count", map[org.Quota]int64{org.StorageBytesPerOrg: 1000}, nil, 700, 700, want{}, want{}},
		{"a disk that cannot be measured fails", map[org.Quota]int64{org.StorageBytesPerOrg: 1000}, fakeDisks{"c1": 1}, 1, 0, want{fault.Internal, ""}, want{fault.Internal, ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := store()
			s := New(st, st, tc.disks, fakePolicies{q: tc.quotas})
			left, err := s.StorageLeft(context.Background(), "org_1")
			tc.leftW.check(t, err)
			if err == nil && left != tc.left {
				t.Fatalf("left %d, want %d", left, tc.left)
			}
			tc.store.check(t, s.BeforeStore(context.Background(), "org_1", tc.n))
		})
	}
	t.Run("unlimited measures nothing", func(t *testing.T) {
		st := store()
		s := New(st, st, disks, fakePolicies{})
		if _, err := s.StorageLeft(context.Background(), "org_1"); err != nil {
			t.Fatal(err)
		}
		if err := s.BeforeStore(context.Background(), "org_1", 5); err != nil || len(st.calls) != 0 {
			t.Fatalf("%v, store calls %v", err, st.calls)
		}
	})
}

package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/org"
	"threadbox/domain/user"
	"threadbox/infra/store"
	"threadbox/infra/store/storetest"
)

// TestReserveRunning: twenty boots of twenty containers of one user race
// for a quota of two running sandboxes; exactly two are recorded running,
// the others are refused and recorded nothing. On PostgreSQL the boots go
// through two Stores on one database, as two servers would.
func TestReserveRunning(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := store.Open(context.Background(), "", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		reserveSuite(t, s, s)
	})
	t.Run("postgres", func(t *testing.T) {
		s := storetest.Postgres(t)
		other, err := store.Open(context.Background(), s.URL(), "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		reserveSuite(t, s, other)
	})
}

func reserveSuite(t *testing.T, a, b *store.Store) {
	ctx := context.Background()
	if _, err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	o, _ := org.New(id("org"), "r-"+id("n"), now)
	if err := a.Accounts().CreateOrg(ctx, o); err != nil {
		t.Fatal(err)
	}
	u, _ := user.New(id("usr"), o.ID(), id("a")+"@acme.test", user.Member, now)
	if err := a.Accounts().CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	owner := u.ID()
	q, _ := org.NewQuotas(map[org.Quota]int64{org.RunningSandboxesPerUser: 2})
	admit := func(user, all int64) error {
		if err := q.Admit(org.RunningSandboxesPerUser, user); err != nil {
			return err
		}
		return q.Admit(org.RunningSandboxesPerOrg, all)
	}
	const boots = 20
	cs := make([]container.Container, boots)
	for i := range cs {
		c, err := container.NewForUser(o.ID(), owner, fmt.Sprintf("box-%d", i), now)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Containers().CreateContainer(ctx, c); err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	errs := make([]error, boots)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, c := range cs {
		st := a
		if i%2 == 1 {
			st = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = st.Quota().ReserveRunning(ctx, c.Booting(fmt.Sprintf("server-%d", i%2), now), admit)
		}()
	}
	close(start)
	wg.Wait()
	admitted := 0
	for i, err := range errs {
		switch {
		case err == nil:
			admitted++
		case !fault.Is(err, fault.RateLimited):
			t.Fatalf("boot %d: %v", i, err)
		}
		got, err := a.Containers().Container(ctx, cs[i].ID())
		if err != nil {
			t.Fatal(err)
		}
		if want := errs[i] == nil; (got.State() == container.Running) != want {
			t.Fatalf("boot %d (err %v) left the record %s", i, errs[i], got.State())
		}
	}
	if admitted != 2 {
		t.Fatalf("%d boots admitted under a quota of 2", admitted)
	}
	if n, err := a.Quota().RunningSandboxes(ctx, o.ID(), owner); err != nil || n != 2 {
		t.Fatalf("running sandboxes %d %v", n, err)
	}
	// A container already counted as running does not count against its
	// own reservation.
	for _, c := range cs {
		if got, _ := a.Containers().Container(ctx, c.ID()); got.State() == container.Running {
			if err := a.Quota().ReserveRunning(ctx, got, admit); err != nil {
				t.Fatalf("reserving a running container again: %v", err)
			}
			break
		}
	}
}

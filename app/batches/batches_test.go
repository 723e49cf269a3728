package batches

import (
	"context"
	"errors"
	"testing"
	"time"

	"threadbox/app/messages/wire"
	"threadbox/app/turns"
	"threadbox/domain/fault"
	"threadbox/domain/user"
)

type fakeUsers map[string]user.User

func (f fakeUsers) User(_ context.Context, id string) (user.User, error) {
	u, ok := f[id]
	if !ok {
		return user.User{}, fault.New(fault.NotFound, "user not found")
	}
	return u, nil
}

// TestRunAsCreator: a request runs only while its batch's creator is an
// enabled user of the batch's org; otherwise it is refused before any
// turn is prepared (this test has no Preparer: reaching it would panic).
func TestRunAsCreator(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	users := fakeUsers{
		"disabled": user.Restore("disabled", "org_1", "d@acme.test", user.Member, true, "", t0),
		"moved":    user.Restore("moved", "org_2", "m@acme.test", user.Member, false, "", t0),
	}
	s := New(nil, nil, Config{Users: users}, nil)
	for _, tt := range []struct{ name, userID string }{{"disabled", "disabled"}, {"in another org", "moved"}, {"removed", "gone"}} {
		c := Claimed{BatchID: "b", CustomID: "c", Params: []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`),
			Principal: user.Principal{UserID: tt.userID, OrgID: "org_1", Role: user.Admin}}
		if _, err := s.run(context.Background(), c); fault.KindOf(err) != fault.Forbidden {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// recordingPreparer counts the turns prepared and prepares none.
type recordingPreparer struct{ calls int }

func (r *recordingPreparer) Prepare(context.Context, user.Principal, *wire.Request, *turns.Thread) (*turns.Turn, error) {
	r.calls++
	return nil, errors.New("no turns in this test")
}

// TestRunRefusesSandboxTokenBatches: a request of a batch whose creator was
// a sandbox token (stored before such tokens were refused at creation) is
// refused before any turn is prepared: the token ended with its turn, and
// its container's work may not go on after it.
func TestRunRefusesSandboxTokenBatches(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	users := fakeUsers{"usr_1": user.Restore("usr_1", "org_1", "u@acme.test", user.Member, false, "", t0)}
	prep := &recordingPreparer{}
	s := New(nil, prep, Config{Users: users}, nil)
	c := Claimed{BatchID: "b", CustomID: "c", Params: []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`),
		Principal: user.Principal{UserID: "usr_1", OrgID: "org_1", Role: user.Member, TokenID: "tok_1", Kind: user.SandboxToken, ContainerID: "thr_1"}}
	if _, err := s.run(context.Background(), c); fault.KindOf(err) != fault.Forbidden || prep.calls != 0 {
		t.Fatalf("a sandbox token's batch request: %v, %d turns prepared; want forbidden, none", err, prep.calls)
	}
}

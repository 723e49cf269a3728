package fsroot_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"threadbox/app/files"
	"threadbox/domain/fault"
	"threadbox/domain/org"
)

// fakeQuota answers StorageLeft from left, refusing at zero as the real
// one does.
type fakeQuota struct {
	left  int64
	err   error
	calls int
}

func (q *fakeQuota) StorageLeft(context.Context, string) (int64, error) {
	q.calls++
	if q.err != nil {
		return 0, q.err
	}
	if q.left == 0 {
		return 0, org.StorageExceeded(1000, 1000, 0)
	}
	return q.left, nil
}

func TestUploadUnderTheStorageQuota(t *testing.T) {
	cases := []struct {
		name     string
		storage  int64 // the policy's storageBytesPerOrg
		quota    fakeQuota
		limit    int64 // the request's cap
		body     string
		kind     fault.Kind // "" means stored
		contains string
		calls    int
		resolved bool // the container was resolved (made) before the refusal
	}{
		{"no storage quota asks nothing", 0, fakeQuota{left: 1}, 100, "0123456789", "", "", 0, true},
		{"fits what is left", 1000, fakeQuota{left: 10}, 100, "0123456789", "", "", 1, true},
		{"nothing left", 1000, fakeQuota{left: 0}, 100, "x", fault.TooLarge, `quota "storageBytesPerOrg" exceeded: your organization may store 1000 bytes (container files, sandbox checkpoints, artifacts, skills, messages and turn logs), 1000 are in use and nothing more fits`, 1, false},
		{"larger than what is left", 1000, fakeQuota{left: 10}, 100, "0123456789A", fault.TooLarge, `quota "storageBytesPerOrg" exceeded: your organization may store 1000 bytes (container files, sandbox checkpoints, artifacts, skills, messages and turn logs), 990 are in use and the upload is larger than the 10 bytes left`, 1, true},
		{"the smaller upload cap is the one named", 1000, fakeQuota{left: 500}, 5, "0123456789", fault.TooLarge, "file exceeds the upload limit of 5 bytes", 1, true},
		{"a failing measure fails", 1000, fakeQuota{err: errors.New("disk gone")}, 100, "x", fault.Internal, "", 1, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.quota
			e := newEnvWith(t, &q)
			qs, err := org.NewQuotas(map[org.Quota]int64{org.StorageBytesPerOrg: tc.storage})
			if err != nil {
				t.Fatal(err)
			}
			e.policies.policy = org.DefaultPolicy().WithQuotas(qs)
			_, err = e.svc.Upload(context.Background(), alice, files.UploadRequest{ScopeID: "s1", Key: "data.bin", Body: strings.NewReader(tc.body), Limit: tc.limit})
			if q.calls != tc.calls {
				t.Fatalf("StorageLeft called %d times, want %d", q.calls, tc.calls)
			}
			_, statErr := os.Stat(e.host("uploads", "data.bin"))
			if resolved := len(e.containers.creates) > 0; resolved != tc.resolved {
				t.Fatalf("container resolved: %v, want %v", resolved, tc.resolved)
			}
			if tc.kind == "" {
				if err != nil || statErr != nil {
					t.Fatalf("upload: %v, file: %v", err, statErr)
				}
				return
			}
			if err == nil || fault.KindOf(err) != tc.kind || !strings.Contains(fault.MessageOf(err), tc.contains) {
				t.Fatalf("got %v, want %s containing %q", err, tc.kind, tc.contains)
			}
			if statErr == nil {
				t.Fatal("a refused upload was stored")
			}
		})
	}
}

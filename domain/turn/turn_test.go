package turn

import (
	"testing"
	"time"
)

func TestNewAndEnd(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name                   string
		id, thread, org, owner string
		wantErr                bool
	}{
		{"valid", "trn_1", "thr_1", "org_1", "usr_1", false},
		{"no id", "", "thr_1", "org_1", "usr_1", true},
		{"no thread", "trn_1", "", "org_1", "usr_1", true},
		{"no owner", "trn_1", "thr_1", "org_1", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := New(tt.id, tt.thread, tt.org, tt.owner, now)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if tr.State() != Running || !tr.EndedAt().IsZero() {
				t.Fatalf("new turn %+v", tr)
			}
			ended := tr.End(Stopped, now.Add(time.Second))
			if ended.State() != Stopped || !ended.EndedAt().Equal(now.Add(time.Second)) {
				t.Fatalf("ended %+v", ended)
			}
			if again := ended.End(Done, now.Add(time.Hour)); again.State() != Stopped || !again.EndedAt().Equal(ended.EndedAt()) {
				t.Fatalf("a second end changed the first: %+v", again)
			}
			if tr.End(Running, now) != tr {
				t.Fatal("ending as running changed the turn")
			}
		})
	}
}

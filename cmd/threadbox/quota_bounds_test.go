package main

import (
	"testing"
)

// TestQuotaBoundsOfTheOperator: the operator's quota defaults and
// ceilings (QUOTA_<NAME>, QUOTA_<NAME>_MAX) apply to every org: a quota
// an org has not set is the default (a ceiling without a default is the
// default), and is enforced; an admin may set one from 1 up to its
// ceiling, and above it is a 400 that changes nothing; null (or 0)
// restores the default, never unlimited past a ceiling.
func TestQuotaBoundsOfTheOperator(t *testing.T) {
	s := startServer(t, "", map[string]string{
		"QUOTA_CONTAINERS_PER_USER": "2", "QUOTA_CONTAINERS_PER_USER_MAX": "3",
		"QUOTA_STORAGE_BYTES_PER_ORG_MAX": "1000000",
	})
	f := newWSFixture(t, s)
	a := f.admin
	quotas := func(cpu, sbo float64) map[string]any {
		return map[string]any{"runningSandboxesPerUser": 0.0, "runningSandboxesPerOrg": 0.0, "containersPerUser": cpu, "storageBytesPerOrg": sbo, "snapshotsPerThread": 0.0, "snapshotBytesPerThread": 0.0}
	}
	if got := quotasOf(t, s, a); mustJSON(got) != mustJSON(quotas(2, 1e6)) {
		t.Fatalf("quotas in force with nothing set: %v", got)
	}
	// The default is enforced.
	mustStatus(t, "first container", s.upload(a, "box-a", "", "a.txt", "a"), 200)
	mustStatus(t, "second container", s.upload(a, "box-b", "", "b.txt", "b"), 200)
	refused(t, "third container", s.upload(a, "box-c", "", "c.txt", "c"), 403, "permission_error", `quota "containersPerUser" reached`, "allows 2 containers per user")

	steps := []struct {
		name  string
		patch string
		words string // of a refusal's message
		want  map[string]any
	}{
		{"above the ceiling", `{"quotas":{"containersPerUser":4}}`,
			"quotas.containersPerUser may be at most 3 on this server (its operator's ceiling); 0 or null restores the server's default, 2", quotas(2, 1e6)},
		{"above a ceiling with other changes", `{"downloads":{"uploaded":false},"quotas":{"storageBytesPerOrg":1000001}}`,
			"quotas.storageBytesPerOrg may be at most 1000000", quotas(2, 1e6)},
		{"up to the ceiling", `{"quotas":{"containersPerUser":3}}`, "", quotas(3, 1e6)},
		{"lowered", `{"quotas":{"containersPerUser":1,"storageBytesPerOrg":500000}}`, "", quotas(1, 5e5)},
		{"null restores the default", `{"quotas":{"containersPerUser":null}}`, "", quotas(2, 5e5)},
		{"0 restores the default, not unlimited", `{"quotas":{"storageBytesPerOrg":0}}`, "", quotas(2, 1e6)},
	}
	for _, st := range steps {
		r := s.do("PATCH", appAPI+"/org/features", a, st.patch)
		if st.words != "" {
			refused(t, st.name, r, 400, "invalid_request_error", st.words)
		} else if r.status != 200 || mustJSON(r.json(t)["quotas"]) != mustJSON(st.want) {
			t.Fatalf("%s: %d %s", st.name, r.status, r.body)
		}
		if got := quotasOf(t, s, a); mustJSON(got) != mustJSON(st.want) {
			t.Fatalf("%s: quotas %v, want %v", st.name, got, st.want)
		}
	}
	if r := s.do("GET", appAPI+"/org/features", a, nil); r.json(t)["downloads"].(map[string]any)["uploaded"] != true {
		t.Fatalf("a refused patch applied a part: %s", r.body)
	}
	// Raised to the ceiling, the org gets its third container.
	mustStatus(t, "raise", s.do("PATCH", appAPI+"/org/features", a, `{"quotas":{"containersPerUser":3}}`), 200)
	mustStatus(t, "third container within the ceiling", s.upload(a, "box-c", "", "c.txt", "c"), 200)
}

// TestQuotaBoundsConfig: bad bounds stop the server at start, naming the
// variable.
func TestQuotaBoundsConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string // the error; "" for none
	}{
		{"none", nil, ""},
		{"a default and a ceiling", map[string]string{"QUOTA_RUNNING_SANDBOXES_PER_ORG": "4", "QUOTA_RUNNING_SANDBOXES_PER_ORG_MAX": "8"}, ""},
		{"not a number", map[string]string{"QUOTA_STORAGE_BYTES_PER_ORG": "5GB"}, `config: QUOTA_STORAGE_BYTES_PER_ORG: "5GB" is not a whole number (0 for none)`},
		{"negative ceiling", map[string]string{"QUOTA_CONTAINERS_PER_USER_MAX": "-1"}, `config: QUOTA_CONTAINERS_PER_USER_MAX: "-1" is not a whole number (0 for none)`},
		{"default above its ceiling", map[string]string{"QUOTA_RUNNING_SANDBOXES_PER_USER": "3", "QUOTA_RUNNING_SANDBOXES_PER_USER_MAX": "2"},
			`config: QUOTA_<NAME>: the default of quota "runningSandboxesPerUser" (3) is above its ceiling (2)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"DATA_DIR": t.TempDir()}
			for k, v := range tt.env {
				env[k] = v
			}
			_, err := loadConfig(func(k string) string { return env[k] })
			if got := ""; err != nil {
				got = err.Error()
				if got != tt.want {
					t.Fatalf("error %q, want %q", got, tt.want)
				}
			} else if tt.want != "" {
				t.Fatalf("no error, want %q", tt.want)
			}
		})
	}
}

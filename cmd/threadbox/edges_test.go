package main

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// TestInputEdges covers edges a review found: a login password past
// bcrypt's 72 bytes, the largest thread page, a fork's title cut inside a
// character.
func TestInputEdges(t *testing.T) {
	s := startServer(t, "", nil)
	f := newWSFixture(t, s)
	a := f.admin

	// bcrypt reads 72 bytes: the right 72 plus more must not log in.
	long := strings.Repeat("p", 72)
	r := s.do("POST", appAPI+"/org/users", a, map[string]any{"email": "long@acme.test", "password": long})
	if r.status != 201 {
		t.Fatalf("create user: %d %s", r.status, r.body)
	}
	login(t, s, "long@acme.test", long)
	if r := s.do("POST", appAPI+"/auth/login", "", map[string]any{"email": "long@acme.test", "password": long + "EXTRA"}); r.status != 401 {
		t.Fatalf("login with 72 right bytes and more: %d %s", r.status, r.body)
	}

	// A password reset by an admin ends the user's sessions and API
	// tokens; so does disabling, and re-enabling brings none back.
	uid := r.json(t)["id"].(string)
	for _, change := range []map[string]any{{"password": "a-new-password"}, {"disabled": true}} {
		pw := long // the password before this change
		if change["disabled"] != nil {
			pw = "a-new-password"
		}
		session := login(t, s, "long@acme.test", pw)
		r := s.do("POST", appAPI+"/tokens", session, map[string]any{"name": "laptop"})
		if r.status != 201 {
			t.Fatalf("api token: %d %s", r.status, r.body)
		}
		api := r.json(t)["token"].(string)
		if r := s.do("PATCH", appAPI+"/org/users/"+uid, a, change); r.status != 200 {
			t.Fatalf("change %v: %d %s", change, r.status, r.body)
		}
		if change["disabled"] != nil {
			if r := s.do("PATCH", appAPI+"/org/users/"+uid, a, map[string]any{"disabled": false}); r.status != 200 {
				t.Fatalf("enable: %d %s", r.status, r.body)
			}
		}
		for name, tok := range map[string]string{"session": session, "api token": api} {
			if r := s.do("GET", appAPI+"/me", tok, nil); r.status != 401 {
				t.Fatalf("%s after %v: %d %s", name, change, r.status, r.body)
			}
		}
	}

	// Failed logins in a row for one email are throttled (429), not
	// answered without end.
	for i := range 11 {
		r := s.do("POST", appAPI+"/auth/login", "", map[string]any{"email": "admin@acme.test", "password": "a wrong guess"})
		want := 401
		if i == 10 {
			want = 429
		}
		if r.status != want || (want == 429 && !strings.Contains(string(r.body), "too many failed logins")) {
			t.Fatalf("failed login %d: %d %s", i+1, r.status, r.body)
		}
	}

	// A page of 100 threads is allowed, as the message says.
	if r := s.do("GET", appAPI+"/thread?limit=100", a, nil); r.status != 200 {
		t.Fatalf("limit=100: %d %s", r.status, r.body)
	}
	if r := s.do("GET", appAPI+"/thread?limit=101", a, nil); r.status != 400 {
		t.Fatalf("limit=101: %d %s", r.status, r.body)
	}

	// "Fork of " + a 500-byte title is cut at a character's start.
	title := strings.Repeat("a", 491) + "é"
	r = s.do("POST", appAPI+"/thread", a, map[string]any{"project_id": f.pid, "title": title})
	if r.status != 201 {
		t.Fatalf("thread: %d %s", r.status, r.body)
	}
	r = s.do("POST", appAPI+"/thread/"+r.json(t)["id"].(string)+"/fork", a, nil)
	if r.status != 201 && r.status != 200 {
		t.Fatalf("fork: %d %s", r.status, r.body)
	}
	got := r.json(t)["title"].(string)
	if !utf8.ValidString(got) || len(got) > 500 || strings.ContainsRune(got, utf8.RuneError) || !strings.HasPrefix(got, "Fork of aaa") {
		t.Fatalf("fork title %q (%d bytes)", got, len(got))
	}
}

// TestSkillUploadsAtOnce: uploads of one skill at the same time each get
// their own version (two took the same number, and one failed with 500).
func TestSkillUploadsAtOnce(t *testing.T) {
	s := startServer(t, "", nil)
	a := s.bootstrap("acme", "admin@acme.test")
	arch := wsZip(t, wsEntry{name: "SKILL.md", body: wsManifest("race", "Runs")})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var versions []int
	for range 6 {
		wg.Go(func() {
			r := s.do("POST", appAPI+"/skills", a, arch, "Content-Type", "application/zip")
			mu.Lock()
			defer mu.Unlock()
			if r.status != 201 {
				t.Errorf("upload: %d %s", r.status, r.body)
				return
			}
			versions = append(versions, int(r.json(t)["version"].(float64)))
		})
	}
	wg.Wait()
	slices.Sort(versions)
	if !slices.Equal(versions, []int{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("versions %v", versions)
	}
}

// TestTextTheDatabaseCannotTake: a NUL character or bytes that are not
// UTF-8 are never answered as a server error. In a name or a title they
// are refused with 400 in the error envelope on both databases, so that
// SQLite, which could store them, takes the same names as PostgreSQL,
// whose text types cannot hold them; in a query parameter PostgreSQL's
// refusal is a 400 too, where SQLite may find nothing. Before,
// PostgreSQL's refusal was answered 500.
func TestTextTheDatabaseCannotTake(t *testing.T) {
	databases(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, nil)
		f := newWSFixture(t, s)
		// names: a name or title the product refuses on either database.
		cases := []struct {
			name         string
			method, path string
			token        string
			body         any
			names        bool
		}{
			{"project name", "POST", appAPI + "/project", f.admin, map[string]any{"name": "a\x00b"}, true},
			{"thread title", "PATCH", appAPI + "/thread/" + f.tid, f.admin, map[string]any{"title": "a\x00b"}, true},
			{"token name", "POST", appAPI + "/tokens", f.admin, map[string]any{"name": "a\x00b"}, true},
			{"login email", "POST", appAPI + "/auth/login", "", map[string]any{"email": "a\x00@acme.test", "password": "a-password"}, false},
			{"thread list cursor", "GET", appAPI + "/thread?before=%00", f.admin, nil, false},
			{"thread list project", "GET", appAPI + "/thread?project_id=%00", f.admin, nil, false},
			{"thread search", "GET", appAPI + "/thread?q=a%00b", f.admin, nil, false},
			{"egress ledger filter", "GET", appAPI + "/org/egress?thread_id=%00", f.admin, nil, false},
			{"egress ledger host", "GET", appAPI + "/org/egress?host=%00", f.admin, nil, false},
		}
		for _, tc := range cases {
			r := s.do(tc.method, tc.path, tc.token, tc.body)
			switch {
			case r.status >= 500:
				t.Errorf("%s: %d %s, want no server error", tc.name, r.status, r.body)
			case (dbURL != "" || tc.names) && r.status != 400:
				t.Errorf("%s: %d %s, want 400", tc.name, r.status, r.body)
			case r.status >= 400:
				r.errorType(t)
			}
		}
		// Nothing refused was stored: the thread keeps its title.
		if r := s.do("GET", appAPI+"/thread/"+f.tid, f.admin, nil); r.json(t)["title"] != "Analysis" {
			t.Errorf("thread after the refused rename: %s", r.body)
		}
	})
}

// TestAdminListingLimits: the audit log's and the egress ledger's limit is
// a whole number from 1 to 1000, as the API document says; anything else
// is refused with 400 in the error envelope. Both took a limit that was
// not a number (or, for the audit log, out of range) for the default page
// and answered 200.
func TestAdminListingLimits(t *testing.T) {
	s := startServer(t, "", nil)
	a := s.bootstrap("acme", "admin@acme.test")
	for _, path := range []string{appAPI + "/org/audit", appAPI + "/org/egress"} {
		for _, tc := range []struct {
			limit  string
			status int
		}{
			{"", 200}, {"1", 200}, {"1000", 200},
			{"0", 400}, {"-1", 400}, {"1001", 400}, {"abc", 400}, {"1.5", 400}, {"99999999999999999999", 400},
		} {
			target := path
			if tc.limit != "" {
				target += "?limit=" + tc.limit
			}
			r := s.do("GET", target, a, nil)
			if r.status != tc.status {
				t.Errorf("GET %s: %d %s, want %d", target, r.status, r.body, tc.status)
				continue
			}
			if r.status == 400 && r.errorType(t) != "invalid_request_error" {
				t.Errorf("GET %s: %s", target, r.body)
			}
		}
	}
}

// TestSkillUploadAfterARefusedOne: a SKILL.md description that is not
// UTF-8 and a display name with a NUL are refused with 400 on both
// databases (SQLite stored them; PostgreSQL refused them after the skill's
// files were written), and leave no version that blocks the next upload: a
// good upload of the same skill is stored. Before, the refused upload's
// files stayed at the version, and every later upload of the skill was
// answered 500 ("file exists").
func TestSkillUploadAfterARefusedOne(t *testing.T) {
	databases(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, nil)
		a := s.bootstrap("acme", "admin@acme.test")
		apiCreate := func(display string) response {
			body, ct := multipartBody(t,
				mpField{name: "display_name", value: display},
				mpField{name: "files[]", filename: "named/SKILL.md", value: wsManifest("named", "Says hello")})
			return s.raw("POST", "/api/gpt/v1/skills", a, body, "Content-Type", ct)
		}
		cases := []struct {
			name      string
			bad, good func() response
		}{
			{"an archive whose description is not UTF-8",
				func() response {
					return s.do("POST", appAPI+"/skills", a, wsZip(t, wsEntry{name: "SKILL.md", body: wsManifest("latin", "caf\xe9")}), "Content-Type", "application/zip")
				},
				func() response {
					return s.do("POST", appAPI+"/skills", a, wsZip(t, wsEntry{name: "SKILL.md", body: wsManifest("latin", "café")}), "Content-Type", "application/zip")
				}},
			{"a Skills API display name with a NUL",
				func() response { return apiCreate("Named\x00") },
				func() response {
					return s.do("POST", appAPI+"/skills", a, wsZip(t, wsEntry{name: "SKILL.md", body: wsManifest("named", "Says hello")}), "Content-Type", "application/zip")
				}},
		}
		for _, tc := range cases {
			if r := tc.bad(); r.status != 400 || !strings.Contains(string(r.body), "UTF-8") {
				t.Errorf("%s: %d %s, want 400 naming UTF-8", tc.name, r.status, r.body)
			}
			if r := tc.good(); r.status != 201 && r.status != 200 {
				t.Errorf("%s, then a good upload: %d %s", tc.name, r.status, r.body)
			}
		}
	})
}

package main

import (
	"fmt"
	"strings"
	"testing"
)

func TestResourcesAndCrossOrgIsolation(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		a := s.bootstrap("acme", "admin@acme.test")
		b := s.bootstrap("globex", "admin@globex.test")
		bMe := s.do("GET", "/api/v1/app/me", b, nil).json(t)

		// Body fields naming another org or owner are ignored.
		r := s.do("POST", "/api/v1/app/project", a, map[string]any{"name": "Research", "org_id": bMe["org_id"], "owner_id": bMe["user_id"], "id": "prj_mine"})
		if r.status != 201 {
			t.Fatalf("create project: %d %s", r.status, r.body)
		}
		prj := r.json(t)
		aMe := s.do("GET", "/api/v1/app/me", a, nil).json(t)
		if prj["owner_id"] != aMe["user_id"] || prj["id"] == "prj_mine" {
			t.Fatalf("body overrode the principal: %v", prj)
		}
		pid := prj["id"].(string)
		r = s.do("POST", "/api/v1/app/thread", a, map[string]any{"project_id": pid, "title": "First", "owner_id": bMe["user_id"]})
		if r.status != 201 {
			t.Fatalf("create thread: %d %s", r.status, r.body)
		}
		tid := r.json(t)["id"].(string)
		if r.json(t)["container_id"] != tid {
			t.Fatalf("a thread's container id is its id: %s", r.body)
		}
		if r := s.do("POST", "/api/v1/app/thread", a, map[string]any{"title": "no project"}); r.status != 400 || r.errorType(t) != "invalid_request_error" {
			t.Fatalf("thread without project: %d %s", r.status, r.body)
		}
		if r := s.do("POST", "/api/v1/app/project", a, `{"name":`); r.status != 400 {
			t.Fatalf("bad JSON: %d", r.status)
		}

		// Another org sees none of it: 404 exactly like a missing id, nothing changes.
		bpr := s.do("POST", "/api/v1/app/project", b, map[string]any{"name": "Theirs"}).json(t)["id"].(string)
		for _, c := range []struct{ method, path string }{
			{"GET", "/api/v1/app/project/" + pid},
			{"PATCH", "/api/v1/app/project/" + pid},
			{"DELETE", "/api/v1/app/project/" + pid},
			{"GET", "/api/v1/app/thread/" + tid},
			{"PATCH", "/api/v1/app/thread/" + tid},
			{"DELETE", "/api/v1/app/thread/" + tid},
			{"GET", "/api/v1/app/project/prj_missing"},
			{"GET", "/api/v1/app/thread/thr_missing"},
		} {
			r := s.do(c.method, c.path, b, map[string]any{"name": "pwned", "title": "pwned"})
			if r.status != 404 || r.errorType(t) != "not_found_error" {
				t.Errorf("%s %s by another org: want 404, got %d %s", c.method, c.path, r.status, r.body)
			}
		}
		if r := s.do("POST", "/api/v1/app/thread", b, map[string]any{"project_id": pid}); r.status != 404 {
			t.Errorf("thread in another org's project: %d", r.status)
		}
		if r := s.do("GET", "/api/v1/app/project/"+pid, a, nil); r.json(t)["name"] != "Research" {
			t.Fatalf("project changed by another org: %s", r.body)
		}
		if r := s.do("GET", "/api/v1/app/thread/"+tid, a, nil); r.json(t)["title"] != "First" {
			t.Fatalf("thread changed by another org: %s", r.body)
		}
		list := s.do("GET", "/api/v1/app/project", b, nil).json(t)["data"].([]any)
		if len(list) != 1 || list[0].(map[string]any)["id"] != bpr {
			t.Fatalf("project list leaked: %v", list)
		}
		if l := s.do("GET", "/api/v1/app/thread", b, nil).json(t)["data"].([]any); len(l) != 0 {
			t.Fatalf("thread list leaked: %v", l)
		}
		// Users of another org are invisible.
		au := s.do("GET", "/api/v1/app/org/users", a, nil).json(t)["data"].([]any)
		if len(au) != 1 {
			t.Fatalf("users leaked: %v", au)
		}
		if r := s.do("PATCH", "/api/v1/app/org/users/"+aMe["user_id"].(string), b, map[string]any{"disabled": true}); r.status != 404 {
			t.Fatalf("cross-org user patch: %d", r.status)
		}
		// Another user's token cannot be revoked.
		if r := s.do("DELETE", "/api/v1/app/tokens/"+aMe["user_id"].(string), b, nil); r.status != 404 {
			t.Fatalf("cross-user revoke: %d", r.status)
		}

		// Rename, page, delete.
		if r := s.do("PATCH", "/api/v1/app/thread/"+tid, a, map[string]any{"title": "Renamed"}); r.status != 200 || r.json(t)["title"] != "Renamed" {
			t.Fatalf("retitle: %d %s", r.status, r.body)
		}
		for i := 0; i < 4; i++ {
			s.do("POST", "/api/v1/app/thread", a, map[string]any{"project_id": pid, "title": fmt.Sprint("t", i)})
		}
		p1 := s.do("GET", "/api/v1/app/thread?limit=2", a, nil).json(t)
		if len(p1["data"].([]any)) != 2 || p1["has_more"] != true {
			t.Fatalf("page 1: %v", p1)
		}
		p2 := s.do("GET", "/api/v1/app/thread?limit=10&before="+p1["last_id"].(string), a, nil).json(t)
		if len(p2["data"].([]any)) != 3 || p2["has_more"] != false {
			t.Fatalf("page 2: %v", p2)
		}
		if r := s.do("GET", "/api/v1/app/thread?limit=0", a, nil); r.status != 400 {
			t.Fatalf("limit=0: %d", r.status)
		}
		if r := s.do("DELETE", "/api/v1/app/thread/"+tid, a, nil); r.status != 204 {
			t.Fatalf("delete thread: %d", r.status)
		}
		if r := s.do("GET", "/api/v1/app/thread/"+tid, a, nil); r.status != 404 {
			t.Fatalf("deleted thread: %d", r.status)
		}
		if r := s.do("DELETE", "/api/v1/app/project/"+pid, a, nil); r.status != 204 {
			t.Fatalf("delete project: %d", r.status)
		}
	})
}

func TestFeaturesPolicyChangedByAdminsOnlyAndAudited(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		a := s.bootstrap("acme", "admin@acme.test")
		r := s.do("GET", "/api/v1/app/org/features", a, nil)
		want := `{"codeExecution":{"enabled":true},"uploads":{"enabled":true,"maxBytes":104857600},"downloads":{"generated":true,"uploaded":true},"contentCredentials":{"enabled":true},"egress":{"enabled":false,"allow":[]},"quotas":{"runningSandboxesPerUser":0,"runningSandboxesPerOrg":0,"containersPerUser":0,"storageBytesPerOrg":0,"snapshotsPerThread":0,"snapshotBytesPerThread":0}}`
		if r.status != 200 || string(r.body) != want {
			t.Fatalf("default policy: %d %s", r.status, r.body)
		}
		r = s.do("PATCH", "/api/v1/app/org/features", a, map[string]any{"downloads": map[string]any{"generated": false}, "uploads": map[string]any{"maxBytes": 1024}})
		want = `{"codeExecution":{"enabled":true},"uploads":{"enabled":true,"maxBytes":1024},"downloads":{"generated":false,"uploaded":true},"contentCredentials":{"enabled":true},"egress":{"enabled":false,"allow":[]},"quotas":{"runningSandboxesPerUser":0,"runningSandboxesPerOrg":0,"containersPerUser":0,"storageBytesPerOrg":0,"snapshotsPerThread":0,"snapshotBytesPerThread":0}}`
		if r.status != 200 || string(r.body) != want {
			t.Fatalf("patched policy: %d %s", r.status, r.body)
		}
		if r := s.do("PATCH", "/api/v1/app/org/features", a, map[string]any{"uploads": map[string]any{"maxBytes": -1}}); r.status != 400 {
			t.Fatalf("negative maxBytes: %d", r.status)
		}
		if r := s.do("PATCH", "/api/v1/app/org/features", a, map[string]any{"codeExecution": map[string]any{"enabled": "yes"}}); r.status != 400 {
			t.Fatalf("wrong type: %d", r.status)
		}
		// A member may read the policy, not change it.
		s.do("POST", "/api/v1/app/org/users", a, map[string]any{"email": "m@acme.test", "password": "member-password"})
		m := login(t, s, "m@acme.test", "member-password")
		if r := s.do("PATCH", "/api/v1/app/org/features", m, map[string]any{"codeExecution": map[string]any{"enabled": false}}); r.status != 403 || r.errorType(t) != "permission_error" {
			t.Fatalf("member patch: %d %s", r.status, r.body)
		}
		if r := s.do("GET", "/api/v1/app/org/features", m, nil); r.status != 200 || string(r.body) != want {
			t.Fatalf("member get: %d %s", r.status, r.body)
		}
		if r := s.do("POST", "/api/v1/app/org/users", m, map[string]any{"email": "x@acme.test"}); r.status != 403 {
			t.Fatalf("member creates user: %d", r.status)
		}
		if r := s.do("GET", "/api/v1/app/org/features", a, nil); string(r.body) != want {
			t.Fatalf("policy changed by refused requests: %s", r.body)
		}
		// Each change is in the audit log with who, when, before and after.
		ev := s.do("GET", "/api/v1/app/org/audit", a, nil).json(t)["data"].([]any)
		var feat []map[string]any
		for _, e := range ev {
			if e := e.(map[string]any); e["action"] == "org.features.update" {
				feat = append(feat, e)
			}
		}
		me := s.do("GET", "/api/v1/app/me", a, nil).json(t)
		if len(feat) != 1 || feat[0]["actor_id"] != me["user_id"] || feat[0]["at"] == "" {
			t.Fatalf("audit: %v", ev)
		}
		before := feat[0]["before"].(map[string]any)["downloads"].(map[string]any)["generated"]
		after := feat[0]["after"].(map[string]any)["downloads"].(map[string]any)["generated"]
		if before != true || after != false {
			t.Fatalf("audit before/after: %v", feat[0])
		}
		// Any address the server accepts keeps the audit log readable (Go's
		// %q once wrote \U000e0001, which is not JSON).
		odd := "tag\U000E0001@acme.test"
		if r := s.do("POST", "/api/v1/app/org/users", a, map[string]any{"email": odd}); r.status != 201 {
			t.Fatalf("create %q: %d %s", odd, r.status, r.body)
		}
		r = s.do("GET", "/api/v1/app/org/audit", a, nil)
		if r.status != 200 || !strings.Contains(string(r.body), `"org.users.create"`) {
			t.Fatalf("audit after an odd address: %d %s", r.status, r.body)
		}
		found := false
		for _, e := range r.json(t)["data"].([]any) {
			if e := e.(map[string]any); e["action"] == "org.users.create" && e["after"].(map[string]any)["email"] == odd {
				found = true
			}
		}
		if !found {
			t.Fatalf("the audit entry lost the address: %s", r.body)
		}
	})
}

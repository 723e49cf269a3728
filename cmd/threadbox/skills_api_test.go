package main

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	msgwire "threadbox/app/messages/wire"
)

// skillFile is one file of a skill upload as the SDK sends it: its path
// in the skill is its file name.
func skillFile(path, body string) io.Reader {
	return anthropic.File(strings.NewReader(body), path, "text/plain")
}

// TestSDKSkills: a skill created with the SDK's Skills call, and a version
// added to it, are the org's skill that container.skills loads (the latest,
// or a version pinned by its id); listing pages with next_page; only
// admins create and delete, and each change is audited; a skill keeps its
// name and holds at least one version.
func TestSDKSkills(t *testing.T) {
	databases(t, testSDKSkills)
}

func testSDKSkills(t *testing.T, dbURL string) {
	s, fake := modelServer(t, dbURL, "anthropic", nil)
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	ctx := context.Background()

	sk, err := cl.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{
		DisplayName: anthropic.String("Quarterly reports"),
		Files: []io.Reader{
			skillFile("report-kit/SKILL.md", wsManifest("report-kit", "Builds quarterly reports")+"first edition\n"),
			skillFile("report-kit/scripts/totals.py", "print('totals')\n"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sk.ID != "skill_report-kit" || sk.DisplayName != "Quarterly reports" || sk.Source.Type != anthropic.BetaSkillSourceTypeCustom ||
		sk.Type != "skill" || !strings.HasPrefix(sk.LatestVersionID, "skl_") || sk.CreatedAt.IsZero() || !sk.UpdatedAt.Equal(sk.CreatedAt) {
		t.Fatalf("created skill %s", sk.RawJSON())
	}
	first := sk.LatestVersionID
	v2, err := cl.Beta.Skills.Versions.New(ctx, sk.ID, anthropic.BetaSkillVersionNewParams{Files: []io.Reader{
		skillFile("report-kit/SKILL.md", wsManifest("report-kit", "Builds quarterly reports, with charts")+"second edition\n"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if v2.SkillID != sk.ID || v2.Name != "report-kit" || v2.Description != "Builds quarterly reports, with charts" || v2.Type != "skill_version" || v2.ID == first {
		t.Fatalf("version %s", v2.RawJSON())
	}
	got, err := cl.Beta.Skills.Get(ctx, sk.ID, anthropic.BetaSkillGetParams{})
	if err != nil || got.LatestVersionID != v2.ID || got.DisplayName != "Quarterly reports" || got.UpdatedAt.Before(got.CreatedAt) {
		t.Fatalf("skill after a version: %v %v", got, err)
	}
	page, err := cl.Beta.Skills.Versions.List(ctx, sk.ID, anthropic.BetaSkillVersionListParams{Limit: anthropic.Int(1)})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != v2.ID || page.NextPage != v2.ID {
		t.Fatalf("first page of versions: %v %v", page, err)
	}
	var ids []string
	for it := cl.Beta.Skills.Versions.ListAutoPaging(ctx, sk.ID, anthropic.BetaSkillVersionListParams{Limit: anthropic.Int(1)}); it.Next(); {
		ids = append(ids, it.Current().ID)
	}
	if strings.Join(ids, ",") != v2.ID+","+first {
		t.Fatalf("versions paged: %v", ids)
	}
	if v, err := cl.Beta.Skills.Versions.Get(ctx, first, anthropic.BetaSkillVersionGetParams{SkillID: sk.ID}); err != nil || v.Description != "Builds quarterly reports" {
		t.Fatalf("version by id: %v %v", v, err)
	}
	resp, err := cl.Beta.Skills.Versions.Download(ctx, first, anthropic.BetaSkillVersionDownloadParams{SkillID: sk.ID})
	if err != nil {
		t.Fatal(err)
	}
	zipped, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	zr, err := zip.NewReader(bytes.NewReader(zipped), int64(len(zipped)))
	if err != nil {
		t.Fatalf("the version's content is not a zip: %v", err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	if slices.Sort(names); strings.Join(names, ",") != "report-kit/SKILL.md,report-kit/scripts/totals.py" {
		t.Fatalf("the version's files: %v", names)
	}
	all, err := cl.Beta.Skills.List(ctx, anthropic.BetaSkillListParams{})
	if err != nil || len(all.Data) != 1 || all.Data[0].ID != sk.ID || all.NextPage != "" {
		t.Fatalf("skills: %v %v", all, err)
	}

	// The latest version is loaded by a request naming the skill's id; a
	// version id pins that version.
	read := func(version string) string {
		t.Helper()
		fake.Push(steps(call(msgwire.SubToolTextEditor, map[string]any{"command": "view", "path": "/mnt/skills/report-kit/SKILL.md"})), textStep("read"))
		p := msgParams("", userText("use the skill"), codeExecTool...)
		p.Container = anthropic.MessageCreateParamsContainerUnion{OfContainers: &anthropic.ContainerParams{
			Skills: []anthropic.SkillParams{{Type: "custom", SkillID: sk.ID, Version: anthropic.String(version)}},
		}}
		msg, err := cl.Messages.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return editorResult(t, msg.Content, 0).Content
	}
	if got := read("latest"); !strings.Contains(got, "second edition") {
		t.Fatalf("latest: %q", got)
	}
	if got := read(first); !strings.Contains(got, "first edition") {
		t.Fatalf("pinned first version: %q", got)
	}

	// Bad uploads change nothing.
	_, err = cl.Beta.Skills.Versions.New(ctx, sk.ID, anthropic.BetaSkillVersionNewParams{Files: []io.Reader{skillFile("other/SKILL.md", wsManifest("other", "x"))}})
	if st, body := apiStatus(t, err); st != 400 || !strings.Contains(body, "keeps its name") {
		t.Fatalf("a version of another name: %d %s", st, body)
	}
	_, err = cl.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{Files: []io.Reader{skillFile("report-kit/SKILL.md", wsManifest("report-kit", "again"))}})
	if st, _ := apiStatus(t, err); st != 409 {
		t.Fatalf("a second skill of the name: %v", err)
	}
	_, err = cl.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{Files: []io.Reader{skillFile("../evil/SKILL.md", wsManifest("evil", "x"))}})
	if st, _ := apiStatus(t, err); st != 400 {
		t.Fatalf("a path out of the skill: %v", err)
	}
	mustStatus(t, "create member", s.do("POST", "/api/v1/app/org/users", tok, map[string]any{"email": "m@acme.test", "role": "member", "password": "member-password"}), 201)
	member := msgClient(s, login(t, s, "m@acme.test", "member-password"))
	if _, err := member.Beta.Skills.Get(ctx, sk.ID, anthropic.BetaSkillGetParams{}); err != nil {
		t.Fatalf("a member reads the org's skills: %v", err)
	}
	_, err = member.Beta.Skills.Versions.New(ctx, sk.ID, anthropic.BetaSkillVersionNewParams{Files: []io.Reader{skillFile("report-kit/SKILL.md", wsManifest("report-kit", "mine"))}})
	if st, _ := apiStatus(t, err); st != 403 {
		t.Fatalf("a member adds a version: %v", err)
	}
	if n := len(s.do("GET", "/api/gpt/v1/skills/"+sk.ID+"/versions", tok, nil).json(t)["data"].([]any)); n != 2 {
		t.Fatalf("%d versions after refused uploads", n)
	}

	if d, err := cl.Beta.Skills.Versions.Delete(ctx, first, anthropic.BetaSkillVersionDeleteParams{SkillID: sk.ID}); err != nil || d.ID != first {
		t.Fatalf("delete a version: %v %v", d, err)
	}
	_, err = cl.Beta.Skills.Versions.Delete(ctx, v2.ID, anthropic.BetaSkillVersionDeleteParams{SkillID: sk.ID})
	if st, _ := apiStatus(t, err); st != 409 {
		t.Fatalf("delete the last version: %v", err)
	}
	if d, err := cl.Beta.Skills.Delete(ctx, sk.ID, anthropic.BetaSkillDeleteParams{}); err != nil || d.ID != sk.ID {
		t.Fatalf("delete the skill: %v %v", d, err)
	}
	_, err = cl.Beta.Skills.Get(ctx, sk.ID, anthropic.BetaSkillGetParams{})
	if st, _ := apiStatus(t, err); st != 404 {
		t.Fatalf("a deleted skill: %v", err)
	}
	audit := string(s.do("GET", appAPI+"/org/audit", tok, nil).body)
	for _, want := range []string{`"skills.upload"`, `"skills.version.delete"`, `"skills.delete"`} {
		if !strings.Contains(audit, want) {
			t.Fatalf("the audit log lacks %s: %s", want, audit)
		}
	}
}

package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// TestSDKOutputsOutliveContainer: what code execution writes to outputs
// stays readable, listed and downloadable by its file id through the
// SDK's Files calls after the sweeper removed its container at its
// maximum age, until it is deleted; an upload with expires_in_seconds
// reports its expiry, one without reports none.
func TestSDKOutputsOutliveContainer(t *testing.T) {
	bin := needDocker(t)
	databases(t, func(t *testing.T, dbURL string) { testOutputsOutliveContainer(t, dbURL, bin) })
}

func testOutputsOutliveContainer(t *testing.T, dbURL, bin string) {
	s, fake := modelServer(t, dbURL, "anthropic", map[string]string{
		"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "CONTAINER_MAX_AGE": "10s", "SWEEP_INTERVAL": "300ms",
	})
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	ctx := context.Background()

	exp, err := cl.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{
		File: anthropic.File(strings.NewReader("short-lived"), "brief.txt", "text/plain"), ExpiresInSeconds: anthropic.Int(3600),
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := exp.ExpiresAt.Sub(exp.CreatedAt); exp.Downloadable || d < 3599*time.Second || d > 3601*time.Second {
		t.Fatalf("an upload with expires_in_seconds: %s", exp.RawJSON())
	}
	if got, err := cl.Beta.Files.GetMetadata(ctx, exp.ID, anthropic.BetaFileGetMetadataParams{}); err != nil || !got.ExpiresAt.Equal(exp.ExpiresAt) {
		t.Fatalf("its metadata: %v %v", got, err)
	}
	plain, err := cl.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{File: anthropic.File(strings.NewReader("kept"), "plain.txt", "text/plain")})
	if err != nil || !strings.Contains(plain.RawJSON(), `"expires_at":null`) {
		t.Fatalf("an upload without: %v %v", plain, err)
	}
	_, err = cl.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{File: anthropic.File(strings.NewReader("x"), "bad.txt", "text/plain"), ExpiresInSeconds: anthropic.Int(60)})
	if st, body := apiStatus(t, err); st != 400 || !strings.Contains(body, "expires_in_seconds") {
		t.Fatalf("a minute: %d %s", st, body)
	}
	if _, err := cl.Beta.Files.GetMetadata(ctx, "L21udC91c2VyLWRhdGEvdXBsb2Fkcy9iYWQudHh0", anthropic.BetaFileGetMetadataParams{}); err == nil {
		t.Fatal("the refused upload was stored")
	}

	fake.Push(bashStep("printf 'q3 totals' > $OUTPUT_DIR/report.txt"), textStep("written"))
	msg, err := cl.Messages.New(ctx, msgParams("keep", userText("write the report"), codeExecTool...))
	if err != nil {
		t.Fatal(err)
	}
	_, r := bashResult(t, msg.Content, 0)
	if len(r.Content) != 1 {
		t.Fatalf("output files %+v", r)
	}
	id := r.Content[0].FileID
	scope := option.WithQuery("scope_id", "keep")

	var dir string
	ents, _ := os.ReadDir(filepath.Join(s.dataDir, "containers"))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), "--keep") {
			dir = filepath.Join(s.dataDir, "containers", e.Name())
		}
	}
	if dir == "" {
		t.Fatalf("no folder of the container among %v", ents)
	}
	waitFor(t, 60*time.Second, func() bool {
		_, err := os.Stat(dir)
		return os.IsNotExist(err)
	}, func() string { return "the sweeper did not remove the expired container\n" + s.stdout.String() })
	fake.Push(textStep("never"))
	if _, err := cl.Messages.New(ctx, msgParams("keep", userText("again"), codeExecTool...)); err == nil {
		t.Fatal("the expired container served a request")
	}

	m, err := cl.Beta.Files.GetMetadata(ctx, id, anthropic.BetaFileGetMetadataParams{}, scope)
	if err != nil || !m.Downloadable || m.SizeBytes != 9 || m.Filename != "report.txt" || !strings.Contains(m.RawJSON(), `"expires_at":null`) {
		t.Fatalf("the retained output: %v %v", m, err)
	}
	resp, err := cl.Beta.Files.Download(ctx, id, anthropic.BetaFileDownloadParams{}, scope)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "q3 totals" {
		t.Fatalf("downloaded %q", body)
	}
	page, err := cl.Beta.Files.List(ctx, anthropic.BetaFileListParams{}, scope)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != id {
		t.Fatalf("listing: %v %v", page, err)
	}
	if _, err := cl.Beta.Files.Delete(ctx, id, anthropic.BetaFileDeleteParams{}, scope); err != nil {
		t.Fatal(err)
	}
	_, err = cl.Beta.Files.GetMetadata(ctx, id, anthropic.BetaFileGetMetadataParams{}, scope)
	if st, _ := apiStatus(t, err); st != 404 {
		t.Fatalf("after delete: %v", err)
	}
}

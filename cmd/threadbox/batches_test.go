package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"threadbox/infra/llm/fakeupstream"
)

// batchModel answers the fake upstream by what each request says, so
// that requests running at once in any order get their own answers:
// "run N" is a bash command printing out-N (after sleeping the
// seconds "sleep S" asks), its result is answered "done" with what the
// command printed, anything else "hi".
func batchModel(fake *fakeupstream.Server) {
	runRe := regexp.MustCompile(`run (\d+)(?: sleep ([0-9.]+))?`)
	fake.SetFallback(func(_ fakeupstream.Format, body json.RawMessage) fakeupstream.Reply {
		var req struct {
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(body, &req)
		if n := len(req.Messages); n > 1 {
			last := string(req.Messages[n-1].Content)
			if m := regexp.MustCompile(`out-\d+`).FindString(last); m != "" {
				return textStep("done " + m)
			}
			return textStep("done")
		}
		first := ""
		if len(req.Messages) > 0 {
			first = string(req.Messages[0].Content)
		}
		if m := runRe.FindStringSubmatch(first); m != nil {
			cmd := "echo out-" + m[1]
			if m[2] != "" {
				cmd = "sleep " + m[2] + "; " + cmd
			}
			return bashStep(cmd)
		}
		return textStep("hi")
	})
}

// batchRequest is one request of a batch: a user message, with code
// execution unless plain.
func batchRequest(id, text string, plain bool) anthropic.MessageBatchNewParamsRequest {
	p := anthropic.MessageBatchNewParamsRequestParams{Model: "default", MaxTokens: 1000, Messages: userText(text)}
	if !plain {
		p.Tools = codeExecTool
	}
	return anthropic.MessageBatchNewParamsRequest{CustomID: id, Params: p}
}

// batchResults reads a batch's results through the SDK, by custom_id.
func batchResults(t *testing.T, cl anthropic.Client, id string) map[string]anthropic.MessageBatchIndividualResponse {
	t.Helper()
	out := map[string]anthropic.MessageBatchIndividualResponse{}
	st := cl.Messages.Batches.ResultsStreaming(context.Background(), id, anthropic.MessageBatchResultsParams{})
	for st.Next() {
		r := st.Current()
		out[r.CustomID] = r
	}
	if err := st.Err(); err != nil {
		t.Fatalf("results: %v", err)
	}
	return out
}

// waitEnded waits until the batch has ended and returns it.
func waitEnded(t *testing.T, cl anthropic.Client, id string, within time.Duration, log func() string) *anthropic.MessageBatch {
	t.Helper()
	var b *anthropic.MessageBatch
	waitFor(t, within, func() bool {
		var err error
		b, err = cl.Messages.Batches.Get(context.Background(), id, anthropic.MessageBatchGetParams{})
		return err == nil && b.ProcessingStatus == anthropic.MessageBatchProcessingStatusEnded
	}, func() string { return fmt.Sprintf("the batch did not end: %+v\n%s", b, log()) })
	return b
}

// TestSDKMessageBatches: a batch created with the SDK runs its requests
// in the background through the same path as live requests (code
// execution included, and a request's own error as its result), ends with
// its counts and results as JSONL; a cancel stops what has not started;
// only ended batches are deleted; bad batches are refused whole.
func TestSDKMessageBatches(t *testing.T) {
	bin := needDocker(t)
	databases(t, func(t *testing.T, dbURL string) { testSDKMessageBatches(t, dbURL, bin) })
}

func testSDKMessageBatches(t *testing.T, dbURL, bin string) {
	s, fake := modelServer(t, dbURL, "anthropic", map[string]string{"BATCH_WORKERS": "1", "SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin})
	batchModel(fake)
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	ctx := context.Background()

	missing := batchRequest("no-skill", "run 3", false)
	missing.Params.Container = anthropic.MessageCreateParamsContainerUnion{OfContainers: &anthropic.ContainerParams{
		Skills: []anthropic.SkillParams{{Type: "custom", SkillID: "no-such-skill"}},
	}}
	b, err := cl.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: []anthropic.MessageBatchNewParamsRequest{
		batchRequest("code", "run 1", false), batchRequest("plain", "say hi", true), missing,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.ID, "msgbatch_") || b.ProcessingStatus != anthropic.MessageBatchProcessingStatusInProgress || b.RequestCounts.Processing != 3 ||
		b.ExpiresAt.Sub(b.CreatedAt) != 24*time.Hour || b.ResultsURL != "" || b.JSON.EndedAt.Valid() {
		t.Fatalf("created %s", b.RawJSON())
	}
	done := waitEnded(t, cl, b.ID, 60*time.Second, s.stdout.String)
	if c := done.RequestCounts; c.Succeeded != 2 || c.Errored != 1 || c.Processing != 0 || done.EndedAt.IsZero() || !strings.HasSuffix(done.ResultsURL, "/v1/messages/batches/"+b.ID+"/results") {
		t.Fatalf("ended %s", done.RawJSON())
	}
	res := batchResults(t, cl, b.ID)
	if len(res) != 3 {
		t.Fatalf("%d results", len(res))
	}
	code := res["code"].Result.AsSucceeded().Message
	if _, r := bashResult(t, code.Content, 0); r.Stdout != "out-1\n" || code.Content[len(code.Content)-1].AsText().Text != "done out-1" {
		t.Fatalf("the code request's result: %s", res["code"].RawJSON())
	}
	if p := res["plain"].Result; p.Type != "succeeded" || p.AsSucceeded().Message.Content[0].AsText().Text != "hi" {
		t.Fatalf("the plain request's result: %s", res["plain"].RawJSON())
	}
	if e := res["no-skill"].Result; e.Type != "errored" || e.AsErrored().Error.Error.Type != "not_found_error" || !strings.Contains(e.RawJSON(), "no-such-skill") {
		t.Fatalf("the failing request's result: %s", res["no-skill"].RawJSON())
	}

	// A cancel: what has not started is canceled, what runs finishes.
	slow := []anthropic.MessageBatchNewParamsRequest{}
	for i := range 4 {
		slow = append(slow, batchRequest(fmt.Sprintf("slow-%d", i), fmt.Sprintf("run %d sleep 1", 10+i), false))
	}
	b2, err := cl.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: slow})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Messages.Batches.Delete(ctx, b2.ID, anthropic.MessageBatchDeleteParams{}); err == nil {
		t.Fatal("a batch in progress was deleted")
	} else if st, _ := apiStatus(t, err); st != 409 {
		t.Fatalf("delete in progress: %v", err)
	}
	c2, err := cl.Messages.Batches.Cancel(ctx, b2.ID, anthropic.MessageBatchCancelParams{})
	if err != nil || c2.CancelInitiatedAt.IsZero() || c2.ProcessingStatus == anthropic.MessageBatchProcessingStatusInProgress {
		t.Fatalf("cancel: %v %v", c2, err)
	}
	e2 := waitEnded(t, cl, b2.ID, 60*time.Second, s.stdout.String)
	if c := e2.RequestCounts; c.Canceled < 3 || c.Canceled+c.Succeeded != 4 {
		t.Fatalf("canceled batch %s", e2.RawJSON())
	}
	canceled := 0
	for _, r := range batchResults(t, cl, b2.ID) {
		if r.Result.Type == "canceled" {
			canceled++
		}
	}
	if int64(canceled) != e2.RequestCounts.Canceled {
		t.Fatalf("%d canceled results, counts %s", canceled, e2.RawJSON())
	}

	page, err := cl.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{Limit: anthropic.Int(1)})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != b2.ID || !page.HasMore {
		t.Fatalf("list: %v %v", page, err)
	}
	var ids []string
	for it := cl.Messages.Batches.ListAutoPaging(ctx, anthropic.MessageBatchListParams{Limit: anthropic.Int(1)}); it.Next(); {
		ids = append(ids, it.Current().ID)
	}
	if strings.Join(ids, ",") != b2.ID+","+b.ID {
		t.Fatalf("listed %v", ids)
	}
	if d, err := cl.Messages.Batches.Delete(ctx, b.ID, anthropic.MessageBatchDeleteParams{}); err != nil || d.ID != b.ID {
		t.Fatalf("delete: %v %v", d, err)
	}
	if _, err := cl.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{}); err == nil {
		t.Fatal("a deleted batch was found")
	} else if st, _ := apiStatus(t, err); st != 404 {
		t.Fatalf("deleted: %v", err)
	}

	// Bad batches are refused whole.
	for name, reqs := range map[string][]anthropic.MessageBatchNewParamsRequest{
		"twice":     {batchRequest("a", "x", true), batchRequest("a", "y", true)},
		"bad id":    {batchRequest("no spaces", "x", true)},
		"no params": {{CustomID: "a"}},
	} {
		_, err := cl.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: reqs})
		if st, body := apiStatus(t, err); st != 400 || !strings.Contains(body, "invalid_request_error") {
			t.Fatalf("%s: %d %s", name, st, body)
		}
	}
	if n := len(s.do("GET", "/api/gpt/v1/messages/batches", tok, nil).json(t)["data"].([]any)); n != 1 {
		t.Fatalf("%d batches after the refused ones", n)
	}
}

// TestMessageBatchSurvivesKill: a batch of 50 requests that run code,
// whose server is killed (kill -9) midway, completes with every result
// once a server runs again on the same database: the requests the dead
// server held are claimed again when their leases lapse.
func TestMessageBatchSurvivesKill(t *testing.T) {
	bin := needDocker(t)
	databases(t, func(t *testing.T, dbURL string) { testBatchSurvivesKill(t, dbURL, bin) })
}

func testBatchSurvivesKill(t *testing.T, dbURL, bin string) {
	fake := fakeupstream.New()
	t.Cleanup(fake.Close)
	batchModel(fake)
	env := childEnv(t, dbURL, map[string]string{
		"MODEL_PROVIDER": "anthropic", "MODEL_BASE_URL": fake.URL(), "MODEL_NAME": "fake-model",
		"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "SANDBOX_WARM_POOL": "0", "LEASE_TTL": "3s", "BATCH_WORKERS": "4",
	})
	first := startChild(t, env)
	tok := first.bootstrap("acme", "admin@acme.test")
	cl := msgClient(first.server, tok)
	ctx := context.Background()
	var reqs []anthropic.MessageBatchNewParamsRequest
	for i := range 50 {
		reqs = append(reqs, batchRequest(fmt.Sprintf("req-%02d", i), fmt.Sprintf("run %d sleep 0.2", i), false))
	}
	b, err := cl.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 120*time.Second, func() bool {
		got, err := cl.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{})
		return err == nil && got.RequestCounts.Succeeded >= 10
	}, func() string { return "the batch did not start\n" + first.stdout.String() })
	first.kill()
	mid, _ := json.Marshal(len(fake.Requests()))
	t.Logf("killed after %s upstream requests", mid)

	second := startChild(t, env)
	cl = msgClient(second.server, tok)
	done := waitEnded(t, cl, b.ID, 180*time.Second, second.stdout.String)
	if c := done.RequestCounts; c.Succeeded != 50 || c.Errored+c.Canceled+c.Expired+c.Processing != 0 {
		t.Fatalf("after the restart: %s", done.RawJSON())
	}
	res := batchResults(t, cl, b.ID)
	for i := range 50 {
		id := fmt.Sprintf("req-%02d", i)
		r, ok := res[id]
		if !ok || r.Result.Type != "succeeded" {
			t.Fatalf("%s: %s", id, r.RawJSON())
		}
		content := r.Result.AsSucceeded().Message.Content
		if _, out := bashResult(t, content, 0); out.Stdout != fmt.Sprintf("out-%d\n", i) {
			t.Fatalf("%s ran %q", id, out.Stdout)
		}
	}
}

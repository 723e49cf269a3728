package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestRunningQuotaHoldsUnderConcurrentBoots: twenty first commands, each
// in a new Messages API container of one user, sent at once against
// runningSandboxesPerUser 2, boot exactly two sandboxes; the other
// eighteen are refused naming the quota (a 429 when the request's own
// check saw the two, an error tool result when the refusal came at the
// boot) and leave no sandbox. On PostgreSQL the commands go to two
// servers on one database and one data folder, ten each, as two replicas
// behind a load balancer would: the slot is reserved in the database.
func TestRunningQuotaHoldsUnderConcurrentBoots(t *testing.T) {
	bin := needDocker(t)
	databases(t, func(t *testing.T, db string) {
		env := map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"}
		s := startServer(t, db, env)
		servers := []*server{s}
		if db != "" {
			second := map[string]string{"DATA_DIR": s.dataDir}
			for k, v := range env {
				second[k] = v
			}
			servers = append(servers, startServer(t, db, second))
		}
		tok := s.bootstrap("acme", "admin@acme.test")
		mustStatus(t, "set the quota", s.do("PATCH", appAPI+"/org/features", tok, map[string]any{"quotas": map[string]any{"runningSandboxesPerUser": 2}}), 200)

		const n = 20
		type answer struct {
			status int
			body   string
			err    error
		}
		answers := make([]answer, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body, _ := json.Marshal(map[string]any{
					"model": "default", "max_tokens": 100, "container": fmt.Sprintf("race-%d", i),
					"tools":    []any{map[string]any{"type": "code_execution_20250825", "name": "code_execution"}},
					"messages": []any{map[string]any{"role": "user", "content": "```bash\necho ran\n```"}},
				})
				req, _ := http.NewRequest("POST", servers[i%len(servers)].base+"/api/gpt/v1/messages", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("Content-Type", "application/json")
				<-start
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					answers[i].err = err
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				answers[i] = answer{resp.StatusCode, string(b), err}
			}()
		}
		close(start)
		wg.Wait()

		ran, refused := 0, 0
		for i, a := range answers {
			switch {
			case a.err != nil:
				t.Fatalf("command %d: %v", i, a.err)
			case a.status == 200 && strings.Contains(a.body, `"stdout":"ran\n"`):
				ran++
			case (a.status == 429 || a.status == 200) && strings.Contains(a.body, `quota \"runningSandboxesPerUser\" reached`):
				refused++
			default:
				t.Fatalf("command %d: %d %s", i, a.status, a.body)
			}
		}
		if ran != 2 || refused != n-2 {
			t.Fatalf("%d commands ran and %d were refused under a quota of 2 running sandboxes", ran, refused)
		}
		if got := sandboxesOf(t, s); len(got) != 2 {
			t.Fatalf("Docker holds %d sandboxes under a quota of 2: %v", len(got), got)
		}
	})
}

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTypeScriptSDKSurface runs the official TypeScript SDK's calls around
// the Messages API against threadbox: the models' capabilities, a Message
// Batch with a code-execution request created, polled to its end and read
// back as results, and a custom skill created from a multipart upload.
func TestTypeScriptSDKSurface(t *testing.T) {
	dir := tsSDK(t)
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"BATCH_WORKERS": "1", "SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin})
	batchModel(fake)
	tok := s.bootstrap("acme", "admin@acme.test")

	cmd := exec.Command("node", filepath.Join(dir, "surface.mjs"))
	cmd.Env = append(os.Environ(), "BASE_URL="+s.base+"/api/gpt", "TOKEN="+tok)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("surface.mjs: %v\n%s\n%s", err, out, stderr)
	}
	var got struct {
		Models []struct {
			ID           string `json:"id"`
			Capabilities struct {
				Batch struct {
					Supported bool `json:"supported"`
				} `json:"batch"`
				CodeExecution struct {
					Supported bool `json:"supported"`
				} `json:"code_execution"`
			} `json:"capabilities"`
		} `json:"models"`
		Created struct {
			ID               string `json:"id"`
			Type             string `json:"type"`
			ProcessingStatus string `json:"processing_status"`
		} `json:"created"`
		Ended struct {
			ProcessingStatus string         `json:"processing_status"`
			RequestCounts    map[string]int `json:"request_counts"`
			ResultsURL       string         `json:"results_url"`
			EndedAt          string         `json:"ended_at"`
		} `json:"ended"`
		Results []struct {
			CustomID string `json:"custom_id"`
			Result   struct {
				Type    string          `json:"type"`
				Message json.RawMessage `json:"message"`
			} `json:"result"`
		} `json:"results"`
		Listed []string `json:"listed"`
		Skill  struct {
			ID              string `json:"id"`
			Type            string `json:"type"`
			DisplayName     string `json:"display_name"`
			LatestVersionID string `json:"latest_version_id"`
			Source          struct {
				Type string `json:"type"`
			} `json:"source"`
		} `json:"skill"`
		Skills []string `json:"skills"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got.Models) == 0 || !got.Models[0].Capabilities.Batch.Supported || !got.Models[0].Capabilities.CodeExecution.Supported {
		t.Fatalf("models %s", out)
	}
	if !strings.HasPrefix(got.Created.ID, "msgbatch_") || got.Created.Type != "message_batch" || got.Created.ProcessingStatus != "in_progress" {
		t.Fatalf("created %+v", got.Created)
	}
	if e := got.Ended; e.ProcessingStatus != "ended" || e.RequestCounts["succeeded"] != 2 || e.EndedAt == "" || e.ResultsURL != s.base+"/api/gpt/v1/messages/batches/"+got.Created.ID+"/results" {
		t.Fatalf("ended %+v", e)
	}
	byID := map[string]string{}
	for _, r := range got.Results {
		if r.Result.Type != "succeeded" {
			t.Fatalf("result %s: %s", r.CustomID, r.Result.Type)
		}
		byID[r.CustomID] = string(r.Result.Message)
	}
	if !strings.Contains(byID["code"], "out-7") || !strings.Contains(byID["plain"], `"hi"`) {
		t.Fatalf("results %v", byID)
	}
	if !slices.Contains(got.Listed, got.Created.ID) {
		t.Fatalf("batch %s not listed: %v", got.Created.ID, got.Listed)
	}
	if sk := got.Skill; sk.ID != "skill_ts-kit" || sk.Type != "skill" || sk.DisplayName != "TypeScript kit" || sk.Source.Type != "custom" || !strings.HasPrefix(sk.LatestVersionID, "skl_") {
		t.Fatalf("skill %+v", sk)
	}
	if !slices.Contains(got.Skills, "skill_ts-kit") {
		t.Fatalf("skills %v", got.Skills)
	}
}

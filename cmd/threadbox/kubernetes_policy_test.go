package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubernetesNeedsANetworkPolicyDeclaration: with SANDBOX_BACKEND=kubernetes
// and no K8S_NETWORK_POLICY the capability matrix shows the backend
// unavailable, naming the setting, before any request to the cluster (here
// a closed loopback port); declared unenforced, its row warns that the
// sandboxes are not network-isolated.
func TestKubernetesNeedsANetworkPolicyDeclaration(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	row := func(declared string) map[string]any {
		t.Helper()
		env := map[string]string{"SANDBOX_BACKEND": "kubernetes", "KUBECONFIG": kubeconfig}
		if declared != "" {
			env["K8S_NETWORK_POLICY"] = declared
		}
		s := startServer(t, "", env)
		r := s.do("GET", "/api/gpt/v1/sandbox/backends", s.bootstrap("acme", "admin@acme.test"), nil)
		var body struct {
			Data []map[string]any `json:"data"`
		}
		if err := json.Unmarshal(r.body, &body); r.status != 200 || err != nil {
			t.Fatalf("capability matrix: %d %s", r.status, r.body)
		}
		for _, e := range body.Data {
			if e["name"] == "kubernetes" {
				return e
			}
		}
		t.Fatalf("no kubernetes row: %s", r.body)
		return nil
	}
	undeclared := row("")
	if undeclared["available"] != false || !strings.Contains(undeclared["reason"].(string), "K8S_NETWORK_POLICY is not set") {
		t.Fatalf("undeclared: %v", undeclared)
	}
	unenforced := row("unenforced")
	if w, _ := unenforced["warning"].(string); !strings.Contains(w, "not network-isolated") || strings.Contains(unenforced["reason"].(string), "K8S_NETWORK_POLICY") {
		t.Fatalf("declared unenforced: %v", unenforced)
	}
}

package messages

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestProductToolsAreCanonical: every definition encoded once and marked
// Canonical is what json.Marshal would write of it again, so an encoder
// may copy it without scanning it.
func TestProductToolsAreCanonical(t *testing.T) {
	all := append(append(append([]ToolDefinition{}, subTools...), pythonTools...), webFetchDefinition)
	for _, d := range sandboxTools {
		all = append(all, d)
	}
	if len(all) < 4 {
		t.Fatalf("only %d product tools", len(all))
	}
	for _, d := range all {
		if !d.Canonical || len(d.Raw) == 0 {
			t.Errorf("%s: not marked canonical", d.Name)
			continue
		}
		again, err := json.Marshal(d)
		if err != nil || !bytes.Equal(again, d.Raw) {
			t.Errorf("%s: json.Marshal writes %s (%v), not its encoding %s", d.Name, again, err, d.Raw)
		}
	}
}

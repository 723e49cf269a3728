package turns

import (
	"encoding/json"
	"testing"
)

func TestWithSystemText(t *testing.T) {
	tests := []struct {
		name, system string
		want         string // JSON
		wantErr      bool
	}{
		{"no system", ``, `"SKILLS"`, false},
		{"null", `null`, `"SKILLS"`, false},
		{"string", `"Be brief."`, `"Be brief.\n\nSKILLS"`, false},
		{"blocks", `[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}]`,
			`[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}},{"text":"SKILLS","type":"text"}]`, false},
		{"a number", `42`, ``, true},
		{"broken string", `"abc`, ``, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := WithSystemText(json.RawMessage(tc.system), "SKILLS")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && string(got) != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

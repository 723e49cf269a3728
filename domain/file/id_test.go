package file

import (
	"encoding/base64"
	"errors"
	"testing"
)

func TestEncodeIDMatchesContractExamples(t *testing.T) {
	tests := []struct{ path, id string }{
		{"/mnt/user-data/uploads/sales.csv", "L21udC91c2VyLWRhdGEvdXBsb2Fkcy9zYWxlcy5jc3Y"},
		{"/mnt/user-data/outputs/revenue.png", "L21udC91c2VyLWRhdGEvb3V0cHV0cy9yZXZlbnVlLnBuZw"},
	}
	for _, tt := range tests {
		if got := EncodeID(tt.path); got != tt.id {
			t.Errorf("EncodeID(%q) = %q, want %q", tt.path, got, tt.id)
		}
		got, err := DecodeID(tt.id)
		if err != nil || got != tt.path {
			t.Errorf("DecodeID(%q) = %q, %v; want %q", tt.id, got, err, tt.path)
		}
	}
}

func TestDecodeIDRoundTrip(t *testing.T) {
	for _, p := range []string{"/", "/a", "/ab", "/abc", "/home/agent/workspace/ü ñ.txt", "/mnt/skills/x/SKILL.md", "/a/b?c>d"} {
		got, err := DecodeID(EncodeID(p))
		if err != nil || got != p {
			t.Errorf("round trip %q = %q, %v", p, got, err)
		}
	}
}

func TestDecodeIDRefusesNonCanonical(t *testing.T) {
	std := base64.StdEncoding.EncodeToString([]byte("/a/b>>?"))    // contains + or /
	stdRaw := base64.RawStdEncoding.EncodeToString([]byte("/??>")) // alphabet differs
	valid := EncodeID("/mnt/user-data/uploads/a.csv")
	tests := []struct{ name, id string }{
		{"empty", ""},
		{"padding", base64.URLEncoding.EncodeToString([]byte("/a"))},
		{"standard alphabet padded", std},
		{"standard alphabet", stdRaw},
		{"newline inside", valid[:4] + "\n" + valid[4:]},
		{"carriage return", valid + "\r"},
		{"space", valid[:4] + " " + valid[4:]},
		{"non-zero trailing bits", "L2F"}, // canonical "/a" is "L2E"
		{"relative path", EncodeID("mnt/user-data/uploads/a.csv")},
		{"dot dot", EncodeID("/mnt/user-data/uploads/../../etc/passwd")},
		{"trailing slash", EncodeID("/mnt/user-data/uploads/")},
		{"double slash", EncodeID("/mnt//user-data")},
		{"dot segment", EncodeID("/mnt/./x")},
		{"NUL", EncodeID("/mnt/a\x00b")},
		{"not base64", "!!!!"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p, err := DecodeID(tt.id); !errors.Is(err, ErrInvalidID) {
				t.Fatalf("DecodeID(%q) = %q, %v; want ErrInvalidID", tt.id, p, err)
			}
		})
	}
}

func TestDecodeIDChecksTheAlphabetTestCases(t *testing.T) {
	// Make sure the alphabet cases above really contain '+' or '/' so the
	// test can fail if the decoder accepted them.
	for _, p := range []string{"/a/b>>?", "/??>"} {
		s := base64.RawStdEncoding.EncodeToString([]byte(p))
		if !containsAny(s, "+/") {
			t.Fatalf("fixture %q encodes to %q without + or /", p, s)
		}
	}
}

func containsAny(s, chars string) bool {
	for _, c := range s {
		for _, d := range chars {
			if c == d {
				return true
			}
		}
	}
	return false
}

package migrations

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
)

// TestDialects checks each dialect's folder: a well-formed file system,
// the same migrations in both, and the dialect's own spelling.
func TestDialects(t *testing.T) {
	names := map[string][]string{}
	for _, tc := range []struct {
		dir      string
		fsys     fs.FS
		has, not string
	}{
		{"postgres", Postgres, "TIMESTAMPTZ", "DATETIME"},
		{"sqlite", SQLite, "DATETIME", "TIMESTAMPTZ"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			if err := fstest.TestFS(tc.fsys, tc.dir+"/00001_init.sql", tc.dir+"/00011_usage_scope.sql"); err != nil {
				t.Fatal(err)
			}
			sub, err := fs.Sub(tc.fsys, tc.dir)
			if err != nil {
				t.Fatal(err)
			}
			got, err := fs.Glob(sub, "*.sql")
			if err != nil {
				t.Fatal(err)
			}
			names[tc.dir] = got
			var all strings.Builder
			for _, n := range got {
				b, err := fs.ReadFile(sub, n)
				if err != nil {
					t.Fatal(err)
				}
				all.Write(b)
			}
			if !strings.Contains(all.String(), tc.has) || strings.Contains(all.String(), tc.not) {
				t.Errorf("%s migrations: want %s and no %s", tc.dir, tc.has, tc.not)
			}
			own, _ := fs.ReadFile(sub, "00011_usage_scope.sql")
			if want, _ := files.ReadFile(tc.dir + "/00011_usage_scope.sql"); string(own) != string(want) {
				t.Errorf("%s: 00011 is not the dialect's own file", tc.dir)
			}
		})
	}
	if strings.Join(names["postgres"], " ") != strings.Join(names["sqlite"], " ") || len(names["sqlite"]) < 16 {
		t.Errorf("migrations differ: postgres %v, sqlite %v", names["postgres"], names["sqlite"])
	}
}

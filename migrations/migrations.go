// Package migrations embeds the versioned SQL schema, one folder per dialect.
// The schema comes only from these files; nothing is auto-migrated.
package migrations

import "embed"

// Postgres holds the PostgreSQL migrations under postgres/.
//
//go:embed postgres/*.sql
var Postgres embed.FS

// SQLite holds the SQLite migrations under sqlite/.
//
//go:embed sqlite/*.sql
var SQLite embed.FS

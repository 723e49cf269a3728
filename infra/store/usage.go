package store

import (
	"context"
	"fmt"
	"time"

	"threadbox/app/usage"
)

// Usage metering (app/usage.Store): one row of counters per org, user, UTC
// day, container and thread, each addition one upsert so that concurrent commands and several
// servers on one database never lose a count. A keyed addition records its
// key in usage_writes in the same transaction, so that sent again it
// counts once.

var (
	_ usage.Store      = Usage{}
	_ usage.Containers = Containers{}
)

const addUsageSQL = `INSERT INTO usage_daily (org_id, user_id, day, container_id, thread_id, commands, wall_ms, cpu_ms, input_tokens, output_tokens, sandbox_ms, sandbox_cpu_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (org_id, user_id, day, container_id, thread_id) DO UPDATE SET
  commands = usage_daily.commands + excluded.commands,
  wall_ms = usage_daily.wall_ms + excluded.wall_ms,
  cpu_ms = usage_daily.cpu_ms + excluded.cpu_ms,
  input_tokens = usage_daily.input_tokens + excluded.input_tokens,
  output_tokens = usage_daily.output_tokens + excluded.output_tokens,
  sandbox_ms = usage_daily.sandbox_ms + excluded.sandbox_ms,
  sandbox_cpu_ms = usage_daily.sandbox_cpu_ms + excluded.sandbox_cpu_ms`

// AddUsage adds u to the counters of its org, user, day, container and
// thread; a keyed u does so in one transaction with the record of its
// key, and adds nothing when its key is recorded already (a write sent
// again after its commit's answer was lost).
func (s Usage) AddUsage(ctx context.Context, u usage.Usage) error {
	if u.Key == "" {
		return s.add(ctx, u)
	}
	return s.inTx(ctx, func(tx *handle) error { return Usage{tx}.add(ctx, u) })
}

// add is AddUsage within the caller's transaction, if any: the key is
// recorded first, and a key recorded already (its insert a no-op) leaves
// the counters as they are.
func (s Usage) add(ctx context.Context, u usage.Usage) error {
	if u.Key != "" {
		res := s.q(ctx).Exec(`INSERT INTO usage_writes (id, written_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING`, u.Key, time.Now().UTC())
		if res.Error != nil {
			return dbError("record usage write", res.Error)
		}
		if res.RowsAffected == 0 {
			return nil // written already
		}
	}
	return s.exec(ctx, "add usage", addUsageSQL, u.OrgID, u.UserID, u.Day, u.ContainerID, u.ThreadID, u.Commands,
		u.Wall.Milliseconds(), u.CPU.Milliseconds(), u.InputTokens, u.OutputTokens,
		u.SandboxTime.Milliseconds(), u.SandboxCPU.Milliseconds())
}

// PruneUsageKeys forgets the keys of the usage writes recorded before t.
func (s Usage) PruneUsageKeys(ctx context.Context, t time.Time) error {
	return s.exec(ctx, "prune usage write keys", `DELETE FROM usage_writes WHERE written_at < ?`, t.UTC())
}

// usageSum is one row of a usage report as scanned: its names and counts,
// and its times in milliseconds, as the table keeps them.
type usageSum struct {
	usage.Row
	WallMs       int64
	CpuMs        int64
	SandboxMs    int64
	SandboxCpuMs int64
}

// UsageReport sums the org's counters of the days from..to, grouped by
// day, by user (with the user's email, empty for a deleted user), by
// container (with its client id and its owner) or by thread (with its
// title and its owner); names of deleted rows are empty.
func (s Usage) UsageReport(ctx context.Context, orgID, from, to string, by usage.GroupBy) ([]usage.Row, error) {
	const sums = `COALESCE(SUM(u.commands), 0) AS commands, COALESCE(SUM(u.wall_ms), 0) AS wall_ms,
  COALESCE(SUM(u.cpu_ms), 0) AS cpu_ms, COALESCE(SUM(u.input_tokens), 0) AS input_tokens,
  COALESCE(SUM(u.output_tokens), 0) AS output_tokens, COALESCE(SUM(u.sandbox_ms), 0) AS sandbox_ms,
  COALESCE(SUM(u.sandbox_cpu_ms), 0) AS sandbox_cpu_ms`
	var q string
	switch by {
	case usage.ByDay:
		q = `SELECT u.day AS day, ` + sums + ` FROM usage_daily u
WHERE u.org_id = ? AND u.day >= ? AND u.day <= ? GROUP BY u.day ORDER BY u.day`
	case usage.ByUser:
		q = `SELECT u.user_id AS user_id, COALESCE(MAX(us.email), '') AS email, ` + sums + ` FROM usage_daily u
LEFT JOIN users us ON us.id = u.user_id
WHERE u.org_id = ? AND u.day >= ? AND u.day <= ? GROUP BY u.user_id ORDER BY u.user_id`
	case usage.ByContainer:
		q = `SELECT u.container_id AS container_id, COALESCE(MAX(c.client_id), '') AS client_id,
  MAX(u.thread_id) AS thread_id, MAX(u.user_id) AS user_id, COALESCE(MAX(us.email), '') AS email, ` + sums + ` FROM usage_daily u
LEFT JOIN containers c ON c.id = u.container_id
LEFT JOIN users us ON us.id = u.user_id
WHERE u.org_id = ? AND u.day >= ? AND u.day <= ? GROUP BY u.container_id ORDER BY u.container_id`
	case usage.ByThread:
		q = `SELECT u.thread_id AS thread_id, COALESCE(MAX(t.title), '') AS title,
  COALESCE(MAX(t.owner_id), '') AS user_id, COALESCE(MAX(us.email), '') AS email, ` + sums + ` FROM usage_daily u
LEFT JOIN threads t ON t.id = u.thread_id AND u.thread_id <> ''
LEFT JOIN users us ON us.id = t.owner_id
WHERE u.org_id = ? AND u.day >= ? AND u.day <= ? GROUP BY u.thread_id ORDER BY u.thread_id`
	default:
		return nil, fmt.Errorf("store: usage report: unknown grouping %q", by)
	}
	var got []usageSum
	if err := s.q(ctx).Raw(q, orgID, from, to).Scan(&got).Error; err != nil {
		return nil, dbError("usage report", err)
	}
	rows := make([]usage.Row, len(got))
	for i, g := range got {
		rows[i] = g.Row
		rows[i].Wall, rows[i].CPU = time.Duration(g.WallMs)*time.Millisecond, time.Duration(g.CpuMs)*time.Millisecond
		rows[i].SandboxTime, rows[i].SandboxCPU = time.Duration(g.SandboxMs)*time.Millisecond, time.Duration(g.SandboxCpuMs)*time.Millisecond
	}
	return rows, nil
}

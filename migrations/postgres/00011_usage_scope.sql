-- +goose Up
-- Usage metering per container and thread: the daily
-- counters gain the container and thread they were spent in ('' when none,
-- for example tokens of a Messages API request without a container), and
-- sandbox time: how long sandboxes ran (sandbox_ms) and the CPU time their
-- control groups used (sandbox_cpu_ms), what hosted code execution bills.
ALTER TABLE usage_daily ADD COLUMN container_id TEXT NOT NULL DEFAULT '';
ALTER TABLE usage_daily ADD COLUMN thread_id TEXT NOT NULL DEFAULT '';
ALTER TABLE usage_daily ADD COLUMN sandbox_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN sandbox_cpu_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_daily DROP CONSTRAINT usage_daily_pkey;
ALTER TABLE usage_daily ADD PRIMARY KEY (org_id, user_id, day, container_id, thread_id);

-- +goose Down
CREATE TABLE usage_daily_old AS
SELECT org_id, user_id, day, SUM(commands)::BIGINT AS commands, SUM(wall_ms)::BIGINT AS wall_ms,
  SUM(cpu_ms)::BIGINT AS cpu_ms, SUM(input_tokens)::BIGINT AS input_tokens, SUM(output_tokens)::BIGINT AS output_tokens
FROM usage_daily GROUP BY org_id, user_id, day;
DROP TABLE usage_daily;
ALTER TABLE usage_daily_old RENAME TO usage_daily;
ALTER TABLE usage_daily ADD PRIMARY KEY (org_id, user_id, day);
CREATE INDEX usage_daily_org_day ON usage_daily(org_id, day);

-- +goose Up
-- Usage metering per container and thread: the daily
-- counters gain the container and thread they were spent in ('' when none,
-- for example tokens of a Messages API request without a container), and
-- sandbox time: how long sandboxes ran (sandbox_ms) and the CPU time their
-- control groups used (sandbox_cpu_ms), what hosted code execution bills.
-- SQLite cannot change a primary key in place: the table is rebuilt.
CREATE TABLE usage_daily_new (
    org_id        TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    day           TEXT NOT NULL,
    container_id  TEXT NOT NULL DEFAULT '',
    thread_id     TEXT NOT NULL DEFAULT '',
    commands      BIGINT NOT NULL DEFAULT 0,
    wall_ms       BIGINT NOT NULL DEFAULT 0,
    cpu_ms        BIGINT NOT NULL DEFAULT 0,
    input_tokens  BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    sandbox_ms     BIGINT NOT NULL DEFAULT 0,
    sandbox_cpu_ms BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (org_id, user_id, day, container_id, thread_id)
);
INSERT INTO usage_daily_new (org_id, user_id, day, commands, wall_ms, cpu_ms, input_tokens, output_tokens)
SELECT org_id, user_id, day, commands, wall_ms, cpu_ms, input_tokens, output_tokens FROM usage_daily;
DROP TABLE usage_daily;
ALTER TABLE usage_daily_new RENAME TO usage_daily;
CREATE INDEX usage_daily_org_day ON usage_daily(org_id, day);

-- +goose Down
CREATE TABLE usage_daily_old (
    org_id        TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    day           TEXT NOT NULL,
    commands      BIGINT NOT NULL DEFAULT 0,
    wall_ms       BIGINT NOT NULL DEFAULT 0,
    cpu_ms        BIGINT NOT NULL DEFAULT 0,
    input_tokens  BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (org_id, user_id, day)
);
INSERT INTO usage_daily_old SELECT org_id, user_id, day, SUM(commands), SUM(wall_ms), SUM(cpu_ms), SUM(input_tokens), SUM(output_tokens)
FROM usage_daily GROUP BY org_id, user_id, day;
DROP TABLE usage_daily;
ALTER TABLE usage_daily_old RENAME TO usage_daily;
CREATE INDEX usage_daily_org_day ON usage_daily(org_id, day);

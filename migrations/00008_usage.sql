-- +goose Up
-- Usage metering: counters per org, user and UTC day,
-- incremented by upsert: commands run in sandboxes with their wall and CPU
-- time, and the model tokens of requests. day is 'YYYY-MM-DD'.
CREATE TABLE usage_daily (
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
CREATE INDEX usage_daily_org_day ON usage_daily(org_id, day);

-- +goose Down
DROP TABLE usage_daily;

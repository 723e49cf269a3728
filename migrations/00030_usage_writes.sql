-- +goose Up
-- The keys of the usage writes that landed (app/usage.Usage.Key), each
-- recorded in the transaction that adds its counts: a write sent again
-- after its commit's answer was lost finds its key here and adds nothing.
-- Kept a day, long past the next flush that sends a failed write again.
CREATE TABLE usage_writes (
    id         TEXT PRIMARY KEY,
    written_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX usage_writes_written_at ON usage_writes(written_at);

-- +goose Down
DROP TABLE usage_writes;

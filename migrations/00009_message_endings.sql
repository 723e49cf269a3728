-- +goose Up
-- Why an assistant message's turn ended unfinished:
-- 'stopped' (the client stopped it or went away) or 'failed' (an error,
-- whose caller-safe text is end_detail); '' for a complete message, and for
-- one left by a server that stopped or died mid-turn.
ALTER TABLE messages ADD COLUMN end_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE messages ADD COLUMN end_detail TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE messages DROP COLUMN end_detail;
ALTER TABLE messages DROP COLUMN end_reason;

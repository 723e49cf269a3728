-- +goose Up
-- A fork is made in steps (the thread, its messages, its files): until the
-- last one, its thread is marked forking, listed to nobody, and removed by
-- the sweep when the server making it is gone.
ALTER TABLE threads ADD COLUMN forking BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX threads_forking ON threads(forking) WHERE forking;

-- +goose Down
DROP INDEX threads_forking;
ALTER TABLE threads DROP COLUMN forking;

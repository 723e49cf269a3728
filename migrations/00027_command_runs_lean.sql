-- +goose Up
-- A command's start record is written, and committed, before the command
-- runs: it is on the path of every tool call. The table holds only the
-- commands running now (each row goes when its command ends), so the two
-- periodic sweeps of it (a server marking its runs seen every second, the
-- settling of runs not seen for a while) scan a few rows without an index,
-- and every insert, seen-mark and delete stops updating two: on SQLite
-- they were half of the insert's time.
DROP INDEX command_runs_holder;
DROP INDEX command_runs_seen;

-- +goose Down
CREATE INDEX command_runs_holder ON command_runs(holder);
CREATE INDEX command_runs_seen ON command_runs(seen_at);

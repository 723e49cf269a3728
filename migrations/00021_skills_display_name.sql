-- +goose Up
-- A skill's human-readable label (the Skills API's display_name), kept on
-- each version as it was when the version was made; the skill shows its
-- latest version's. Versions made before have none: their name stands in.
ALTER TABLE skills ADD COLUMN display_name TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE skills DROP COLUMN display_name;

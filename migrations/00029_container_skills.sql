-- +goose Up
-- Whether a container's skills folder may hold skills: set before a skill
-- is loaded into it, cleared once a turn without skills emptied it. A turn
-- that asks for no skills of a container that holds none then needs no
-- look at its folder. The containers recorded before this may hold some.
ALTER TABLE containers ADD COLUMN skills_loaded BOOLEAN NOT NULL DEFAULT TRUE;

-- +goose Down
ALTER TABLE containers DROP COLUMN skills_loaded;

-- +goose Up
-- What stays of a container removed at its maximum age: its id is never
-- made again, and every later request naming it fails as expired rather
-- than finding a new, empty container of the same id.
CREATE TABLE container_tombstones (
    id         TEXT PRIMARY KEY,
    client_id  TEXT NOT NULL,
    org_id     TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    owner_id   TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    expired_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX container_tombstones_org ON container_tombstones(org_id);

-- +goose Down
DROP TABLE container_tombstones;

-- +goose Up
-- Where each container's saved sandbox lives: a compressed archive in the
-- blob store of its org, named by its SHA-256. One per container. No
-- foreign keys: a record whose container (or org) is gone is found by the
-- sweep, which removes its blob with it.
CREATE TABLE container_checkpoints (
    container_id TEXT PRIMARY KEY,
    org_id       TEXT NOT NULL,
    backend      TEXT NOT NULL,
    sha256       TEXT NOT NULL,
    size_bytes   BIGINT NOT NULL,
    taken_at     TIMESTAMPTZ NOT NULL
);
CREATE INDEX container_checkpoints_org ON container_checkpoints(org_id);
CREATE INDEX container_checkpoints_taken ON container_checkpoints(taken_at);

-- +goose Down
DROP TABLE container_checkpoints;

-- +goose Up
-- Org secrets of the egress proxy: a header it adds to requests for the
-- host patterns a secret is bound to (one a line). The value is sealed
-- (AES-256-GCM under the install key, base64) and never read back
-- through the API.
CREATE TABLE egress_secrets (
    org_id        TEXT NOT NULL,
    name          TEXT NOT NULL,
    hosts         TEXT NOT NULL,
    header        TEXT NOT NULL,
    sealed_value  TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (org_id, name)
);

-- +goose Down
DROP TABLE egress_secrets;

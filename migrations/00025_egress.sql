-- +goose Up
-- Controlled egress: the org policy's egress switch (off by default) and
-- its allowlist of host patterns, one a line; and the ledger of every
-- connection the egress proxy allowed or refused.
ALTER TABLE orgs ADD COLUMN feature_egress BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE orgs ADD COLUMN egress_allow TEXT NOT NULL DEFAULT '';
CREATE TABLE egress_ledger (
    id            TEXT PRIMARY KEY,
    org_id        TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    thread_id     TEXT NOT NULL,
    container_id  TEXT NOT NULL,
    host          TEXT NOT NULL,
    port          INTEGER NOT NULL,
    address       TEXT NOT NULL,
    allowed       BOOLEAN NOT NULL,
    rule          TEXT NOT NULL,
    reason        TEXT NOT NULL,
    bytes_up      BIGINT NOT NULL,
    bytes_down    BIGINT NOT NULL,
    duration_ms   BIGINT NOT NULL,
    at            TIMESTAMPTZ NOT NULL
);
CREATE INDEX egress_ledger_org_at ON egress_ledger(org_id, at, id);
CREATE INDEX egress_ledger_container_at ON egress_ledger(container_id, at);

-- +goose Down
DROP TABLE egress_ledger;
ALTER TABLE orgs DROP COLUMN egress_allow;
ALTER TABLE orgs DROP COLUMN feature_egress;

-- +goose Up
-- Message Batches: a batch and its requests, run in the background by any
-- server on the database. A request is claimed by one server process at a
-- time with a lease (claimed_by, lease_until) that the process renews while
-- it runs the request; one whose process died is claimed again once its
-- lease lapsed. The creator's principal is kept, as the requests run as it.
CREATE TABLE message_batches (
    id                  TEXT PRIMARY KEY,
    org_id              TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    user_id             TEXT NOT NULL,
    role                TEXT NOT NULL,
    token_kind          TEXT NOT NULL DEFAULT '',
    token_id            TEXT NOT NULL DEFAULT '',
    container_id        TEXT NOT NULL DEFAULT '',
    status              TEXT NOT NULL,
    created_at          TIMESTAMPTZ NOT NULL,
    expires_at          TIMESTAMPTZ NOT NULL,
    cancel_initiated_at TIMESTAMPTZ,
    ended_at            TIMESTAMPTZ
);
CREATE INDEX message_batches_org ON message_batches(org_id, created_at);
CREATE INDEX message_batches_status ON message_batches(status);

CREATE TABLE message_batch_requests (
    batch_id      TEXT NOT NULL REFERENCES message_batches(id) ON DELETE CASCADE,
    custom_id     TEXT NOT NULL,
    idx           INTEGER NOT NULL,
    org_id        TEXT NOT NULL,
    params        TEXT NOT NULL,
    status        TEXT NOT NULL,
    claimed_by    TEXT NOT NULL DEFAULT '',
    lease_until   TIMESTAMPTZ,
    attempts      INTEGER NOT NULL DEFAULT 0,
    message       TEXT NOT NULL DEFAULT '',
    error_kind    TEXT NOT NULL DEFAULT '',
    error_message TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (batch_id, custom_id)
);
CREATE INDEX message_batch_requests_status ON message_batch_requests(status, lease_until);
CREATE INDEX message_batch_requests_order ON message_batch_requests(batch_id, idx);

-- +goose Down
DROP TABLE message_batch_requests;
DROP TABLE message_batches;

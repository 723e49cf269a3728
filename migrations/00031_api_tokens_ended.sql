-- +goose Up
-- The sweep deletes the token records that expired or were revoked more
-- than a day ago (app/auth, SweepTokens); these indexes let it find them
-- without reading the whole table on every sweep.
CREATE INDEX api_tokens_expires_at ON api_tokens(expires_at);
CREATE INDEX api_tokens_revoked_at ON api_tokens(revoked_at);

-- +goose Down
DROP INDEX api_tokens_revoked_at;
DROP INDEX api_tokens_expires_at;

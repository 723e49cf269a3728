-- +goose Up
-- Login throttling: counters of login attempts per client
-- address, per email and per email and address, each in a window; and the
-- addresses each email logged in from, which its email counter does not
-- lock out.
CREATE TABLE login_attempts (
    name         TEXT PRIMARY KEY,
    attempts     INTEGER NOT NULL,
    window_start TIMESTAMPTZ NOT NULL
);
CREATE INDEX login_attempts_window ON login_attempts(window_start);

CREATE TABLE login_addresses (
    email   TEXT NOT NULL,
    addr    TEXT NOT NULL,
    seen_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (email, addr)
);
CREATE INDEX login_addresses_seen ON login_addresses(seen_at);

-- +goose Down
DROP TABLE login_addresses;
DROP TABLE login_attempts;

-- +goose Up
CREATE TABLE orgs (
    id                         TEXT PRIMARY KEY,
    name                       TEXT NOT NULL UNIQUE,
    disabled                   BOOLEAN NOT NULL DEFAULT FALSE,
    feature_code_execution     BOOLEAN NOT NULL DEFAULT TRUE,
    feature_uploads            BOOLEAN NOT NULL DEFAULT TRUE,
    feature_uploads_max_bytes  BIGINT  NOT NULL DEFAULT 104857600,
    feature_downloads_generated BOOLEAN NOT NULL DEFAULT TRUE,
    feature_downloads_uploaded BOOLEAN NOT NULL DEFAULT TRUE,
    created_at                 TIMESTAMPTZ NOT NULL
);

CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    org_id        TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    email         TEXT NOT NULL UNIQUE,
    role          TEXT NOT NULL CHECK (role IN ('admin', 'member')),
    disabled      BOOLEAN NOT NULL DEFAULT FALSE,
    password_hash TEXT NOT NULL DEFAULT '',
    created_at    TIMESTAMPTZ NOT NULL
);
CREATE INDEX users_org ON users(org_id);

CREATE TABLE api_tokens (
    id           TEXT PRIMARY KEY,
    user_id      TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    org_id       TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    name         TEXT NOT NULL DEFAULT '',
    kind         TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL,
    revoked_at   TIMESTAMPTZ,
    last_used_at TIMESTAMPTZ
);
CREATE INDEX api_tokens_user ON api_tokens(user_id);

CREATE TABLE projects (
    id         TEXT PRIMARY KEY,
    org_id     TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    owner_id   TEXT NOT NULL REFERENCES users(id),
    name       TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX projects_org ON projects(org_id);

CREATE TABLE threads (
    id         TEXT PRIMARY KEY,
    org_id     TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    owner_id   TEXT NOT NULL REFERENCES users(id),
    title      TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX threads_owner ON threads(org_id, owner_id, created_at);

CREATE TABLE containers (
    id             TEXT PRIMARY KEY,
    client_id      TEXT NOT NULL,
    org_id         TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    owner_id       TEXT NOT NULL REFERENCES users(id),
    thread_id      TEXT NOT NULL DEFAULT '',
    state          TEXT NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    last_active_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX containers_last_active ON containers(state, last_active_at);

CREATE TABLE messages (
    id         TEXT PRIMARY KEY,
    thread_id  TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    role       TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content    TEXT NOT NULL,
    usage      TEXT NOT NULL DEFAULT '',
    complete   BOOLEAN NOT NULL DEFAULT FALSE,
    created_at TIMESTAMPTZ NOT NULL,
    UNIQUE (thread_id, seq)
);

CREATE TABLE artifacts (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    thread_id   TEXT NOT NULL,
    tool_use_id TEXT NOT NULL DEFAULT '',
    path        TEXT NOT NULL,
    name        TEXT NOT NULL,
    mime_type   TEXT NOT NULL,
    size_bytes  BIGINT NOT NULL,
    sha256      TEXT NOT NULL,
    version     INTEGER NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (project_id, thread_id, path, version)
);
CREATE INDEX artifacts_project ON artifacts(project_id, created_at);

CREATE TABLE skills (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    version     INTEGER NOT NULL,
    sha256      TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (org_id, name, version)
);

CREATE TABLE audit_events (
    id       TEXT PRIMARY KEY,
    org_id   TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    actor_id TEXT NOT NULL,
    action   TEXT NOT NULL,
    target   TEXT NOT NULL DEFAULT '',
    before   TEXT NOT NULL DEFAULT '',
    after    TEXT NOT NULL DEFAULT '',
    at       TIMESTAMPTZ NOT NULL
);
CREATE INDEX audit_events_org ON audit_events(org_id, at);

-- +goose Down
DROP TABLE audit_events;
DROP TABLE skills;
DROP TABLE artifacts;
DROP TABLE messages;
DROP TABLE containers;
DROP TABLE threads;
DROP TABLE projects;
DROP TABLE api_tokens;
DROP TABLE users;
DROP TABLE orgs;

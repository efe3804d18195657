-- Sign-ins ended before their cookie expired: a copy of such a cookie is refused until
-- `until` (Unix seconds), when it would have expired anyway.
CREATE TABLE signed_out (
    id TEXT PRIMARY KEY,
    until BIGINT NOT NULL
);

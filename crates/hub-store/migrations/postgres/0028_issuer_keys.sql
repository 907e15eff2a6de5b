-- The hub's OIDC signing keys (SPEC §10, keyless AWS): the private key sealed like other
-- secrets, the newest unretired one signs, and a replaced key stays published until its
-- overlap ends (retired_at + the overlap), then is dropped.
CREATE TABLE issuer_keys (
    kid         UUID        PRIMARY KEY,
    sealed_key  BYTEA       NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    retired_at  TIMESTAMPTZ
);

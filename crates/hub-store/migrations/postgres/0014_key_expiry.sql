-- An API key may expire: past expires_at it is refused like a revoked one. NULL never expires.
ALTER TABLE api_keys ADD COLUMN expires_at TIMESTAMPTZ;

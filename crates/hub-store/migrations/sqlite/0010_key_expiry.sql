-- An API key may expire: past expires_at (microseconds since the epoch) it is refused like a
-- revoked one. NULL never expires.
ALTER TABLE api_keys ADD COLUMN expires_at INTEGER;

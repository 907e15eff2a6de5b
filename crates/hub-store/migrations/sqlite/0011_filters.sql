-- Content filters (hub_core::routing::Filters): the JSON array as written, '[]' for none.
ALTER TABLE subscriptions ADD COLUMN filters TEXT NOT NULL DEFAULT '[]';

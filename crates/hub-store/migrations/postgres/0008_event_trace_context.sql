-- The hub's own trace context of an event (the W3C traceparent of its ingest write span), kept
-- while traces are exported, so each delivery attempt's span continues the event's trace.
ALTER TABLE events ADD COLUMN hub_traceparent TEXT;

-- Version 4: the all-tenant event feed (Redis stream cy:{feed}:log), so that
-- an all-tenant ListEvents or WatchEvents resumed past the feed's Redis
-- retention walks the same order from the archive. One row per feed entry
-- (a range of one tenant's events, announced per tenant and flush), not
-- per event: the events themselves are in cycles_events.
CREATE TABLE cycles_feed (
    -- The feed entry's stream id: its ms part (partition key) and sequence.
    occurred_at timestamptz NOT NULL,
    seq         bigint      NOT NULL,
    -- The tenant whose range the entry announces (for analysts; the reads
    -- take it from body).
    tenant_id   text        NOT NULL,
    -- The feed entry as it was in Redis (stream id, then its fields), like
    -- cycles_events.body.
    body        bytea       NOT NULL,
    PRIMARY KEY (occurred_at, seq)
) PARTITION BY RANGE (occurred_at);

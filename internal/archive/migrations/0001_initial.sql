-- Schema version 1 of the cyclesd archive: settled reservations, events,
-- audit entries, and the archive positions.
--
-- Every history table is partitioned by day (RANGE on its time column; the
-- archive creates the day partitions itself and drops whole days past
-- -archive-retention) and keyed tenant first: tenant_id leads every primary
-- key and index, so it is the Citus distribution key
-- (create_distributed_table('<table>', 'tenant_id')).
-- Money is bigint (int64) everywhere.

CREATE TABLE cycles_reservations (
    -- Fixed-width columns first, widest first: no alignment padding.
    -- finalized_at (committed, released) or expired_at (expired), from Redis
    -- TIME: the partition key and the order of the usage reports.
    settled_at         timestamptz NOT NULL,
    estimate           bigint      NOT NULL,
    charged            bigint,
    debt_incurred      bigint      NOT NULL DEFAULT 0,
    created_at_ms      bigint      NOT NULL,
    expires_at_ms      bigint      NOT NULL,
    grace_ms           bigint      NOT NULL DEFAULT 0,
    ext_count          integer     NOT NULL DEFAULT 0,
    max_ext            integer     NOT NULL DEFAULT 0,
    -- 1 committed, 2 released, 3 expired.
    state              smallint    NOT NULL,
    -- The reservation id r_<tenant>_<32 hex> is stored as its 128-bit
    -- random part (16 bytes instead of 40+ in the row and the key); an id
    -- of another form is keyed by its MD5 and kept whole in reservation_id.
    rid                uuid        NOT NULL,
    tenant_id          text        NOT NULL,
    reservation_id     text,
    unit               text        NOT NULL,
    scope_path         text        NOT NULL,
    policy             text        NOT NULL DEFAULT '',
    idem_key           text        NOT NULL DEFAULT '',
    subject            text        NOT NULL DEFAULT '',
    action             text        NOT NULL DEFAULT '',
    -- Stored only when they are not derivable from scope_path, as in Redis.
    affected           text        NOT NULL DEFAULT '',
    budgeted           text        NOT NULL DEFAULT '',
    metadata           text        NOT NULL DEFAULT '',
    committed_metadata text        NOT NULL DEFAULT '',
    -- The stored replies of the settling call (commit or release), so a
    -- replay past the hot window answers with the original bytes.
    replay             bytea,
    PRIMARY KEY (tenant_id, rid, settled_at)
) PARTITION BY RANGE (settled_at);

-- Listing by creation time within a tenant (ListReservations time windows).
CREATE INDEX cycles_reservations_created ON cycles_reservations (tenant_id, created_at_ms);

CREATE TABLE cycles_events (
    tenant_id   text        NOT NULL,
    event_id    text        NOT NULL,
    occurred_at timestamptz NOT NULL,
    -- The event as it was rendered while in Redis.
    body        bytea       NOT NULL,
    PRIMARY KEY (tenant_id, event_id, occurred_at)
) PARTITION BY RANGE (occurred_at);

CREATE TABLE cycles_audit_entries (
    tenant_id   text        NOT NULL,
    entry_id    text        NOT NULL,
    occurred_at timestamptz NOT NULL,
    body        bytea       NOT NULL,
    PRIMARY KEY (tenant_id, entry_id, occurred_at)
) PARTITION BY RANGE (occurred_at);

-- How far each archive stream has been copied, committed in the same
-- transaction as the rows it covers; fence is the lease generation of the
-- writer, so a replica whose lease lapsed cannot move a position back.
CREATE TABLE cycles_archive_positions (
    stream     text        PRIMARY KEY,
    position   text        NOT NULL,
    fence      bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

// Package archive is cyclesd's one PostgreSQL client: the durable history of
// settled reservations, events and audit entries once they leave Redis's hot
// window (docs/archive.md, docs/operations.md#archive).
//
// The schema is versioned (migrations/NNNN_name.sql, applied in order at
// start by Migrate, each with its version row in one transaction). History
// tables are partitioned by UTC day and keyed tenant first; the archive
// creates day partitions as batches need them and drops whole days past the
// retention (no row deletes). A batch of rows and the archive position that
// covers them commit in one transaction, inserts skip rows already present,
// and the position carries the writer's lease fence: re-writing a batch
// after a crash is harmless, and a writer whose lease lapsed is refused.
//
// Nothing else in cyclesd talks to PostgreSQL; Redis stays the only clock
// of the ledger (every time stored here came from Redis TIME).
package archive

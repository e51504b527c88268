// Package archiver runs the archive's upkeep beside the ledger: it keeps
// the day partitions of the PostgreSQL archive (internal/archive) ready
// ahead of traffic and drops whole days past -archive-retention, on Redis
// TIME (lua/archive/clock.lua), the ledger's one clock.
//
// It is the Redis side of the archive: what reads Redis goes through
// internal/script, what writes PostgreSQL through internal/archive.
package archiver

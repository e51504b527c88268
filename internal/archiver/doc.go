// Package archiver is the Redis side of the PostgreSQL archive
// (internal/archive):
//
//   - Archiver copies settled reservations from the tenants' archive queues
//     (appended by the scripts that settle them, when an archive is
//     configured) to PostgreSQL exactly once, then starts their Redis TTL of
//     -hot-retention. One replica at a time holds its lease
//     (lua/archive/lease.lua); the lease's fence goes with every batch. It
//     copies the tenants' event and audit streams and the global audit log
//     too, from a position per stream (the streams keep their retention).
//   - Maintainer keeps the archive's day partitions ready ahead of traffic
//     and drops whole days past -archive-retention, on Redis TIME
//     (lua/archive/clock.lua), the ledger's one clock.
//
// What reads Redis goes through internal/script, what writes PostgreSQL
// through internal/archive.
package archiver

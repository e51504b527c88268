package events

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

// Reads over both stores. With an archive (Options.ArchivedStream) a
// tenant's log is one sequence in two places: Redis keeps its newest part
// (retention trims a prefix), the archive holds everything the archiver
// copied, older entries included. A read takes Redis's window first (which
// names Redis's oldest entry, atomically with the entries) and then, only for
// ids below that oldest entry, the archive: whatever retention trimmed before
// the Redis read is archived (the archiver copies a stream long before its
// retention ends), so the two parts join without a gap or a repeat. A live
// watcher stands at or after Redis's oldest entry and never asks the archive.

// logWindow is one read of a tenant's log over both stores.
type logWindow struct {
	// window is Redis's read (Now, First, Last); Entries is the merged
	// result: the archived entries, then Redis's, at most n in all.
	window
	// more: entries after the last one returned may exist within the read's
	// range (the read was full), so the reader is not caught up.
	more bool
}

// archiveUnavailable is the error of a read whose archive part failed: the
// client is told, and resumes from its last cursor, rather than given a gap.
func archiveUnavailable(cause error) error {
	return &apierr.Error{Code: apierr.Unavailable, Message: "the event archive is unavailable: resume from the last cursor",
		Details: map[string]string{"store": "archive"}, Cause: cause}
}

// belowRedis reports whether a read starting at from ("-" or an id) begins
// below first, the oldest entry Redis holds ("" when it holds none).
func belowRedis(from, first string) bool {
	if first == "" || from == "-" {
		return true
	}
	f, err1 := ParseID(first)
	s, err2 := ParseID(from)
	return err1 == nil && err2 == nil && s.Less(f)
}

// readLog is readPaced over tenant's log in both stores: up to n entries
// with from <= id <= to ("-" and "+" for the ends), oldest first. The
// archived entries it returns are paid for like Redis's (sp's rates), so a
// replay from the archive is paced like one from Redis. An archive that
// cannot be read is UNAVAILABLE (archiveUnavailable).
func (s *Service) readLog(ctx context.Context, sp *streamPace, tenant, from, to string, n int) (logWindow, error) {
	w, err := s.readPaced(ctx, sp, keys.Tenant(tenant).Events(), from, to, n)
	if err != nil {
		return logWindow{}, err
	}
	lw := logWindow{window: w, more: len(w.Entries) >= n}
	if s.opts.ArchivedStream == nil || !belowRedis(from, w.First) {
		return lw, nil
	}
	older, err := s.archived(ctx, tenant, from, to, w.First, n)
	if err != nil {
		if ctx.Err() != nil {
			return logWindow{}, ctx.Err()
		}
		return logWindow{}, archiveUnavailable(err)
	}
	if len(older) == 0 {
		return lw, nil
	}
	merged := older
	merged = append(merged, w.Entries...)
	if len(merged) >= n {
		merged, lw.more = merged[:n], true
	}
	// readPaced was paid for Redis's entries; settle the difference.
	if d := len(merged) - len(w.Entries); d > 0 {
		sp.charge(d) // a debt, waited for before the stream's next read
	} else {
		sp.refund(-d)
	}
	lw.Entries = merged
	return lw, nil
}

// newestArchived is the id of the newest archived entry of stream (a
// tenant log, the feed; "" when none): where a NOW watch of a stream that
// Redis holds none of starts, so that it does not replay the archive.
func (s *Service) newestArchived(ctx context.Context, stream string) (string, error) {
	rows, err := s.opts.ArchivedStream(ctx, stream, true, "+", "-", 1)
	if err != nil {
		return "", archiveUnavailable(err)
	}
	if len(rows) == 0 || len(rows[0]) == 0 {
		return "", nil
	}
	return rows[0][0], nil
}

// archiveLost reports whether the archive's own retention (whole days older
// than Options.ArchiveRetention are dropped) may have removed events after
// p, which a read below Redis's oldest entry would then skip. Like lost, it
// errs only towards refusing: a position whose watermark is older than the
// horizon.
func (s *Service) archiveLost(p Position, now int64) bool {
	if s.opts.ArchiveRetention <= 0 {
		return false
	}
	horizon := now - s.opts.ArchiveRetention.Milliseconds()
	return p.mark()-clockSlack.Milliseconds() < horizon
}

// gone is the CURSOR_EXPIRED error of a reader at p whose read from from
// found first as Redis's oldest entry of the stream, when events after p
// may be gone: trimmed by Redis retention (without an archive), or dropped
// by the archive's retention (a read below Redis's oldest entry); nil
// otherwise.
func (s *Service) gone(ctx context.Context, rpc string, p Position, from, first string, now int64) error {
	switch {
	case s.opts.ArchivedStream == nil:
		if s.lost(p, first, now) {
			return s.expiredErr(ctx, rpc)
		}
	case belowRedis(from, first) && s.archiveLost(p, now):
		return s.archiveExpiredErr(ctx, rpc)
	}
	return nil
}

// readable is how long the log stays readable: Redis's retention, or with
// an archive the archive's (0: not known, nothing is judged lost).
func (s *Service) readable() time.Duration {
	if s.opts.ArchivedStream != nil {
		return s.opts.ArchiveRetention
	}
	return s.opts.Retention
}

// archiveExpiredErr is CURSOR_EXPIRED for a position past the archive's retention.
func (s *Service) archiveExpiredErr(ctx context.Context, rpc string) error {
	s.cursorExpired.Add(ctx, 1, metric.WithAttributes(attribute.String("rpc", rpc)))
	return apierr.New(ReasonCursorExpired,
		"events after this cursor may have been dropped by the archive's retention (%s): restart from START_POSITION_EARLIEST or START_POSITION_NOW",
		s.opts.ArchiveRetention).With("archive_retention_ms", strconv.FormatInt(s.opts.ArchiveRetention.Milliseconds(), 10))
}

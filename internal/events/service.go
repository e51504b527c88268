package events

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
)

// Page sizes of ListEvents.
const (
	DefaultListLimit = 50
	MaxListLimit     = 200
)

// ReasonCursorExpired is the ErrorInfo reason of a resume whose missed events
// may have been trimmed by retention (gRPC FAILED_PRECONDITION).
const ReasonCursorExpired apierr.Code = "CURSOR_EXPIRED"

// clockSlack absorbs clock differences between Redis nodes (failover) when
// deciding whether retention may have trimmed events after a position.
const clockSlack = time.Minute

// TenantCategories are the categories a tenant API key may see (docs/protocol.md#events).
var TenantCategories = []string{"budget", "reservation", "tenant"}

// Categories are all event categories.
var Categories = []string{"budget", "tenant", "api_key", "policy", "reservation", "system", "webhook"}

// Options configure the service.
type Options struct {
	// Retention must equal the retention the emitting scripts trim by (the
	// -event-retention setting of every replica); default eventctx.DefaultRetention.
	Retention time.Duration
	// Heartbeat is the longest a watch stays silent; default 15 s.
	Heartbeat time.Duration
	// PollInterval is how often the tail of a watched tenant's stream is
	// checked for new events: once per tenant per process, shared by all of
	// its watchers; default 250 ms.
	PollInterval time.Duration
	// ReadBatch is the number of entries a watcher reads per call: the bound
	// of its in-memory buffer and of the Redis time one read takes (pace.go);
	// default 32, at most 1000.
	ReadBatch int
	// SendBuffer is how many messages a watch may have read ahead of its
	// client; default 64.
	SendBuffer int
	// SendStall is how long a watch waits with a full buffer before it cuts
	// the client off with SLOW_CONSUMER; default 30 s.
	SendStall time.Duration
	// FeedBlock is the BLOCK period of the process's one waiter on the
	// all-tenant feed (an idle feed costs one XREAD per period); default 2 s.
	FeedBlock time.Duration
	// StreamEventsPerSecond paces the reads of one WatchEvents stream (0 =
	// DefaultStreamEventsPerSecond; negative = unlimited). See pace.go.
	StreamEventsPerSecond float64 `defaults:"keep-negative"`
	// TenantEventsPerSecond paces the reads of all of a tenant's
	// WatchEvents streams on this replica together (0 =
	// DefaultTenantEventsPerSecond; negative = unlimited).
	TenantEventsPerSecond float64 `defaults:"keep-negative"`
	// FeedStreamEventsPerSecond paces the reads of one all-tenant feed
	// stream (admin WatchEvents without tenant_id; 0 =
	// DefaultFeedStreamEventsPerSecond; negative = unlimited).
	FeedStreamEventsPerSecond float64 `defaults:"keep-negative"`
	// FeedEventsPerSecond paces the reads of all the all-tenant feed streams
	// and listings on this replica together (0 = DefaultFeedEventsPerSecond;
	// negative = unlimited).
	FeedEventsPerSecond float64 `defaults:"keep-negative"`
	// FeedBurstEvents is how many events an all-tenant feed stream may read
	// before its rates apply (0 = DefaultFeedBurstEvents; at least one
	// read). See pace.go.
	FeedBurstEvents int `defaults:"keep-negative"`
	MeterProvider   metric.MeterProvider
	Logger          *zap.Logger
	// ArchivedStream, when set, reads a stream's entries from the archive
	// (internal/archiver Reader.Stream): ListEvents and WatchEvents then
	// serve the part of a tenant's log that retention trimmed from Redis
	// from it (archived.go).
	ArchivedStream func(ctx context.Context, key string, desc bool, hi, lo string, n int) ([][]string, error)
	// ArchivedEvent, when set, finds an event no longer in Redis in the
	// archive (internal/archiver Reader.Event): its stream id, then its
	// field/value pairs.
	ArchivedEvent func(ctx context.Context, tenant, id string) ([]string, bool, error)
	// ArchiveRetention is the archive's own retention (-archive-retention):
	// a watch resuming below Redis's oldest entry from a position older than
	// it is CURSOR_EXPIRED. 0: not checked.
	ArchiveRetention time.Duration
}

// DefaultOptions are the settings an Options field left at zero takes in New
// (defaults.Fill); each field's comment says what it means.
func DefaultOptions() Options {
	return Options{
		Retention:                 eventctx.DefaultRetention,
		Heartbeat:                 15 * time.Second,
		PollInterval:              250 * time.Millisecond,
		ReadBatch:                 32,
		SendBuffer:                64,
		SendStall:                 30 * time.Second,
		FeedBlock:                 2 * time.Second,
		StreamEventsPerSecond:     DefaultStreamEventsPerSecond,
		TenantEventsPerSecond:     DefaultTenantEventsPerSecond,
		FeedStreamEventsPerSecond: DefaultFeedStreamEventsPerSecond,
		FeedEventsPerSecond:       DefaultFeedEventsPerSecond,
		FeedBurstEvents:           DefaultFeedBurstEvents,
	}
}

// Service serves the per-tenant event logs.
type Service struct {
	r        reader
	opts     Options
	log      *zap.Logger
	tails    *tails
	feedTail *feedTail
	pace     *pacer        // tenant streams, keyed by tenant
	feedPace *pacer        // the all-tenant feed, one shared bucket (allFeed)
	slots    chan struct{} // watch reads in Redis now (readSlots)

	delivered     metric.Int64Counter
	heartbeats    metric.Int64Counter
	active        metric.Int64UpDownCounter
	cursorExpired metric.Int64Counter
	paced         metric.Int64Counter
}

// New builds the service.
func New(exec *script.Executor, opts Options) *Service {
	defaults.Fill(&opts, DefaultOptions())
	defaults.Cap(&opts.ReadBatch, maxRead)
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	m := telemetry.Meter(opts.MeterProvider, "events")
	active, err := m.Int64UpDownCounter("cycles.events.watches.active", metric.WithDescription("Open WatchEvents streams"))
	if err != nil {
		panic(err)
	}
	s := &Service{
		r:             reader{exec: exec},
		opts:          opts,
		log:           log,
		delivered:     telemetry.MustCounter(m, "cycles.events.delivered", "Events sent to clients, by rpc (watch, list)"),
		heartbeats:    telemetry.MustCounter(m, "cycles.events.heartbeats", "Heartbeats sent on idle watch streams"),
		active:        active,
		cursorExpired: telemetry.MustCounter(m, "cycles.events.cursor_expired", "Reads refused because retention may have trimmed events after the cursor"),
	}
	s.paced = telemetry.MustCounter(m, "cycles.events.paced", "Watch reads held back by a replay rate (per stream, per tenant, or the all-tenant feed's)")
	s.pace = newPacer(opts.StreamEventsPerSecond, opts.TenantEventsPerSecond, opts.ReadBatch, time.Now)
	s.feedPace = newPacer(opts.FeedStreamEventsPerSecond, opts.FeedEventsPerSecond, max(opts.FeedBurstEvents, opts.ReadBatch), time.Now)
	s.slots = make(chan struct{}, readSlots)
	s.tails = newTails(s.r, opts.PollInterval, log)
	s.feedTail = newFeedTail(exec, opts.FeedBlock, log)
	return s
}

// filter is the resolved, authorised selection of one request.
type filter struct {
	// tenant is the log to read; "" = every tenant (the all-tenant feed).
	tenant string
	types  map[string]bool
	cats   map[string]bool
	prefix string
	// corr, when set, keeps only the events with this correlation id
	// (ListEvents' correlation_id).
	corr string
}

func (f filter) match(ev *cyclesv1.Event) bool {
	if len(f.types) > 0 && !f.types[ev.GetEventType()] {
		return false
	}
	if !f.cats[ev.GetCategory()] {
		return false
	}
	if f.corr != "" && ev.GetCorrelationId() != f.corr {
		return false
	}
	if f.prefix != "" {
		s := ev.GetScope()
		if s != f.prefix && !strings.HasPrefix(s, f.prefix+"/") {
			return false
		}
	}
	return true
}

// resolve decides which tenant's log the caller reads and what it may see: a
// tenant key reads its own tenant (tenant_id empty or equal) and only the
// tenant-accessible categories; the admin key names any tenant and category,
// or reads every tenant (the all-tenant feed) with tenant_id empty. cursor is
// the request's cursor: an all-tenant cursor is only for the admin key's
// all-tenant mode.
func resolve(p auth.Principal, tenantID string, types, cats []string, prefix, cursor string) (filter, error) {
	f := filter{types: set(types), cats: map[string]bool{}, prefix: prefix}
	allowed := Categories
	feedCursor := cursor != "" && IsFeedCursor(cursor)
	switch {
	case p.Admin:
		f.tenant = tenantID
		if tenantID != "" && feedCursor {
			return filter{}, apierr.Invalid("cursor", "is an all-tenant cursor: resume it without tenant_id")
		}
	case p.Tenant != "":
		if tenantID != "" && tenantID != p.Tenant {
			return filter{}, apierr.New(apierr.Forbidden, "a tenant key can only read its own tenant's events").With("tenant_id", tenantID)
		}
		if feedCursor {
			return filter{}, apierr.New(apierr.Forbidden, "the all-tenant event feed needs the admin key").With("cursor", "all-tenant")
		}
		f.tenant = p.Tenant
		allowed = TenantCategories
	default:
		return filter{}, apierr.New(apierr.Unauthorized, "an API key or the admin key is required")
	}
	if len(cats) == 0 {
		cats = allowed
	}
	ok := set(allowed)
	for _, c := range cats {
		if !ok[c] {
			return filter{}, apierr.New(apierr.Forbidden, "category %q is not visible to this caller", c).With("category", c)
		}
		f.cats[c] = true
	}
	return f, nil
}

func set(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// lost reports whether retention may have trimmed events after p, given the
// oldest retained id first and the Redis time now. Trimming only removes a
// prefix of the log, and only events older than now - retention, so nothing
// after p can be gone if p is at or after first, or if p's watermark is
// younger than the retention horizon.
func (s *Service) lost(p Position, first string, now int64) bool {
	if first == "" {
		return false
	}
	f, err := ParseID(first)
	if err != nil || !p.ID.Less(f) {
		return false
	}
	horizon := now - s.opts.Retention.Milliseconds()
	return p.mark()-clockSlack.Milliseconds() < horizon
}

func (s *Service) expiredErr(ctx context.Context, rpc string) error {
	s.cursorExpired.Add(ctx, 1, metric.WithAttributes(attribute.String("rpc", rpc)))
	return apierr.New(ReasonCursorExpired,
		"events after this cursor may have been trimmed (retention %s): restart from START_POSITION_EARLIEST or START_POSITION_NOW",
		s.opts.Retention).With("retention_ms", strconv.FormatInt(s.opts.Retention.Milliseconds(), 10))
}

// Watch streams the events of one tenant log to send until ctx ends or send
// fails. It returns nil when the client goes away.
func (s *Service) Watch(ctx context.Context, p auth.Principal, req *cyclesv1.WatchEventsRequest, send func(*cyclesv1.WatchEventsResponse) error) error {
	f, err := resolve(p, req.GetTenantId(), req.GetEventTypes(), req.GetCategories(), req.GetScopePrefix(), req.GetCursor())
	if err != nil {
		return err
	}
	if f.tenant == "" {
		return s.watchAll(ctx, f, req, send)
	}
	var pos Position
	fromStart := false
	switch req.GetStart() {
	case cyclesv1.StartPosition_START_POSITION_CURSOR:
		if pos, err = DecodeCursor("cursor", req.GetCursor()); err != nil {
			return err
		}
	case cyclesv1.StartPosition_START_POSITION_EARLIEST:
		fromStart = true
	default:
		w, err := s.r.read(ctx, f.tenant, "+", "+", 1)
		if err != nil {
			return err
		}
		pos.Watermark = w.Now
		last := w.Last
		if last == "" && s.opts.ArchivedStream != nil {
			// Redis holds none of the log (retention trimmed all of it):
			// the newest event may be in the archive, and a NOW watch
			// must start after it, not replay the archive.
			if last, err = s.newestArchived(ctx, keys.Tenant(f.tenant).Events()); err != nil {
				return err
			}
		}
		if last != "" {
			if pos.ID, err = ParseID(last); err != nil {
				return err
			}
		}
	}

	s.active.Add(ctx, 1)
	defer s.active.Add(context.WithoutCancel(ctx), -1)
	t := s.tails.acquire(f.tenant)
	defer s.tails.release(f.tenant, t)
	out := s.newSender(ctx, send) // bounded buffer; cuts off a client that stops reading
	defer out.close()
	sp := s.pace.open(f.tenant) // replay budget of this stream and its tenant
	defer sp.close()

	watchAttr := metric.WithAttributes(attribute.String("rpc", "watch"))
	hb := time.NewTimer(s.opts.Heartbeat)
	defer hb.Stop()
	heartbeatDue := false
	for {
		from := pos.ID.Next().String()
		if fromStart {
			from = "-"
		}
		// Paced (pace.go): over the stream's or the tenant's replay rate it
		// waits before reading, so a catch-up cannot take the CPU (here and
		// in Redis) other tenants need. With an archive, what retention
		// trimmed from Redis is read from it (archived.go).
		w, err := s.readLog(ctx, sp, f.tenant, from, "+", s.opts.ReadBatch)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		// Checked on every read, not only on resume: a live watcher that fell
		// behind retention must be told rather than skip events silently.
		if !fromStart {
			if err := s.gone(ctx, "watch", pos, from, w.First, w.Now); err != nil {
				return err
			}
		}
		fromStart = false
		for _, e := range w.Entries {
			id, err := ParseID(e.ID)
			if err != nil {
				return err
			}
			pos = Position{ID: id, Watermark: pos.Watermark}
			ev := toEvent(f.tenant, e, id)
			if !f.match(ev) {
				continue
			}
			if err := out.send(&cyclesv1.WatchEventsResponse{Item: &cyclesv1.WatchEventsResponse_Event{Event: ev}}); err != nil {
				return sendErr(ctx, err)
			}
			s.delivered.Add(ctx, 1, watchAttr)
			hb.Reset(s.opts.Heartbeat)
		}
		if w.more {
			continue // more is waiting; the buffer stays one batch
		}
		// Caught up at Redis time w.Now: everything appended later has an id
		// of at least about w.Now.
		if w.Now > pos.Watermark {
			pos.Watermark = w.Now
		}
		if heartbeatDue {
			hbMsg := &cyclesv1.Heartbeat{ServerTimeMs: w.Now, Cursor: EncodeCursor(pos)}
			// Counted when handed to the sender: the client may read it
			// before this goroutine runs again.
			s.heartbeats.Add(ctx, 1)
			if err := out.send(&cyclesv1.WatchEventsResponse{Item: &cyclesv1.WatchEventsResponse_Heartbeat{Heartbeat: hbMsg}}); err != nil {
				return sendErr(ctx, err)
			}
			heartbeatDue = false
			hb.Reset(s.opts.Heartbeat)
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-out.failed():
			return sendErr(ctx, err)
		case <-s.tails.after(t, pos.ID):
		case <-hb.C:
			// Re-read first, so the heartbeat carries a fresh position.
			heartbeatDue = true
		}
	}
}

func sendErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil //nolint:nilerr // the stream's end was the client's own cancel, not a failure
	}
	return err
}

// List pages one tenant's log, oldest first. Each call scans a bounded
// window (at most 4 x limit entries), so a selective filter may return a
// short page with has_more set.
func (s *Service) List(ctx context.Context, p auth.Principal, req *cyclesv1.ListEventsRequest) (*cyclesv1.ListEventsResponse, error) {
	f, err := resolve(p, req.GetTenantId(), req.GetEventTypes(), req.GetCategories(), req.GetScopePrefix(), req.GetCursor())
	if err != nil {
		return nil, err
	}
	if f.corr, err = correlationFilter(req.GetCorrelationId()); err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	defaults.Set(&limit, DefaultListLimit)
	defaults.Cap(&limit, MaxListLimit)
	if f.tenant == "" {
		return s.listAll(ctx, f, req, limit)
	}
	from, to := "-", "+"
	var start ID
	var pos Position
	hasCursor := req.GetCursor() != ""
	if hasCursor {
		if pos, err = DecodeCursor("cursor", req.GetCursor()); err != nil {
			return nil, err
		}
		start = pos.ID.Next()
	}
	if req.FromMs != nil {
		// A stream id is taken at XADD, after the event's timestamp was read
		// in the same script: id >= timestamp, so this bound loses nothing.
		if fm := (ID{MS: uint64(req.GetFromMs())}); start.Less(fm) {
			start = fm
		}
	}
	if hasCursor || req.FromMs != nil {
		from = start.String()
	}
	if req.ToMs != nil {
		// The id may trail the timestamp by the script's run time; the slack
		// keeps such events in range, the timestamp filter below is exact.
		to = ID{MS: uint64(req.GetToMs()) + uint64(clockSlack.Milliseconds()), Seq: ^uint64(0)}.String()
	}
	scan := 4 * limit
	w, err := s.r.read(ctx, f.tenant, from, to, scan)
	if err != nil {
		return nil, err
	}
	entries, full := []entry(w.Entries), len(w.Entries) == scan
	if s.opts.ArchivedStream != nil {
		// Redis keeps the log's newest part; what retention trimmed before
		// its first entry is read from the archive, so the listing goes on
		// where Redis's log starts, without a gap or a repeat.
		if hasCursor {
			if err := s.gone(ctx, "list", pos, from, w.First, w.Now); err != nil {
				return nil, err
			}
		}
		older, err := s.archived(ctx, f.tenant, from, to, w.First, scan)
		if err != nil {
			return nil, archiveUnavailable(err)
		}
		if len(older) == scan {
			entries, full = older, true // the rest waits for the next page
		} else {
			entries = append(older, entries...)
		}
	} else if hasCursor && s.lost(pos, w.First, w.Now) {
		return nil, s.expiredErr(ctx, "list")
	}
	resp := &cyclesv1.ListEventsResponse{}
	var last ID
	consumed := 0
	for _, e := range entries {
		if len(resp.Events) == limit {
			break
		}
		id, err := ParseID(e.ID)
		if err != nil {
			return nil, err
		}
		last, consumed = id, consumed+1
		ev := toEvent(f.tenant, e, id)
		if !f.match(ev) {
			continue
		}
		if req.FromMs != nil && ev.GetTimestampMs() < req.GetFromMs() || req.ToMs != nil && ev.GetTimestampMs() > req.GetToMs() {
			continue
		}
		resp.Events = append(resp.Events, ev)
	}
	if consumed < len(entries) || full {
		resp.HasMore = true
		resp.NextCursor = EncodeCursor(Position{ID: last})
	}
	s.delivered.Add(ctx, int64(len(resp.Events)), metric.WithAttributes(attribute.String("rpc", "list")))
	return resp, nil
}

// archived reads up to n entries of tenant's log from the archive with ids
// in [from, to] older than first, the oldest entry Redis holds ("" when
// the log is empty in Redis: then the whole range).
func (s *Service) archived(ctx context.Context, tenant, from, to, first string, n int) ([]entry, error) {
	return s.archivedIn(ctx, keys.Tenant(tenant).Events(), from, to, first, n)
}

// archivedIn is archived for any archived stream key (a tenant log, the
// all-tenant feed).
func (s *Service) archivedIn(ctx context.Context, key, from, to, first string, n int) ([]entry, error) {
	hi := to
	if first != "" {
		fid, err := ParseID(first)
		if err != nil {
			return nil, err
		}
		if fid == (ID{}) {
			return nil, nil
		}
		b := fid.before()
		if to == "+" {
			hi = b.String()
		} else if tid, err := ParseID(to); err == nil && b.Less(tid) {
			hi = b.String()
		}
	}
	rows, err := s.opts.ArchivedStream(ctx, key, false, hi, from, n)
	if err != nil {
		return nil, fmt.Errorf("read %s from the archive: %w", key, err)
	}
	out := make([]entry, 0, len(rows))
	for _, r := range rows {
		out = append(out, entryOfRow(r))
	}
	return out, nil
}

// entryOfRow is an entry from a stream id and its field/value pairs.
func entryOfRow(r []string) entry {
	e := entry{F: make(map[string]string, len(r)/2)}
	if len(r) > 0 {
		e.ID = r[0]
	}
	for i := 1; i+1 < len(r); i += 2 {
		e.F[r[i]] = r[i+1]
	}
	return e
}

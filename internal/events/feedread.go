package events

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

// maxReadRetries is how many times in a row a watch retries a read that
// failed with UNAVAILABLE before it ends with that status.
const maxReadRetries = 3

// feedBatch is the number of feed entries (tenant ranges) read per call.
const feedBatch = 100

// announceDelayBound is how long after its events a range is assumed to
// reach the feed at the latest (normally milliseconds; after a crash, one
// reconciliation interval). It only decides when a range whose tenant log no
// longer holds its start is reported as trimmed (see rangeLost).
const announceDelayBound = time.Hour

// feedReader walks the all-tenant feed from a position: entry by entry, each
// entry's tenant range read from that tenant's log in ReadBatch windows.
type feedReader struct {
	s   *Service
	f   filter
	sp  *streamPace // the replay budget of this stream (or listing) and of the whole feed on this replica
	pos FeedPosition
	// fromStart: the next feed read starts at the oldest retained entry (or
	// at seekFrom, when set) and is not checked against retention.
	fromStart bool
	seekFrom  string
	// earliest: the reader started at START_POSITION_EARLIEST at startNow, so
	// ranges that were already at the retention horizon then are delivered
	// as far as they are retained instead of being refused.
	earliest bool
	startNow int64
}

// visit is called for every tenant log entry read, in feed order; when
// matched, ev is the event and ev.Cursor the position after it (ev is nil
// for an entry the filter drops). It returns stop to end the step right
// after this entry.
type visit func(ev *cyclesv1.Event, matched bool) (stop bool, err error)

// step reads one batch of the feed and visits the events of its ranges. It
// returns whether the reader reached the end of the feed and the Redis time
// of the feed read.
func (r *feedReader) step(ctx context.Context, fn visit) (caughtUp bool, now int64, err error) {
	from := r.pos.Entry.Next().String()
	switch {
	case r.fromStart && r.seekFrom != "":
		from = r.seekFrom
	case r.fromStart:
		from = "-"
	case r.pos.Partial:
		from = r.pos.Entry.String() // re-read the entry to finish its range
	}
	w, more, err := r.readFeed(ctx, from)
	if err != nil {
		return false, 0, err
	}
	if r.earliest && r.startNow == 0 {
		r.startNow = w.Now
	}
	if !r.fromStart {
		if err := r.s.gone(ctx, "feed", r.pos.at(), from, w.First, w.Now); err != nil {
			return false, w.Now, err
		}
	}
	if r.pos.Partial && (len(w.Entries) == 0 || w.Entries[0].ID != r.pos.Entry.String()) {
		// The entry the reader was inside is gone from the feed.
		return false, w.Now, r.s.expiredErr(ctx, "feed")
	}
	r.fromStart = false
	if w.Last != "" {
		if last, err := ParseID(w.Last); err == nil {
			r.s.feedTail.observe(last)
		}
	}
	mark := r.pos.Watermark
	ranges := make([]feedRange, len(w.Entries))
	for i, fe := range w.Entries {
		rg, err := parseRange(fe)
		if err != nil {
			return false, w.Now, err
		}
		if r.pos.Partial && rg.entry == r.pos.Entry {
			rg.start = r.pos.In
		}
		ranges[i] = rg
	}
	// The first window of the next few ranges is read concurrently (each
	// tenant log is its own key, on Cluster often its own shard), then
	// delivered strictly in feed order: a busy Redis (a sweep in progress)
	// then costs one wait per prefetchRanges ranges, not one per range.
	pf := newPrefetcher(ctx, r.s, r.f, r.sp, ranges)
	defer pf.stop()
	for i, rg := range ranges {
		f0 := pf.get(i)
		if !rg.valid {
			// Not written by events/announce: skip it rather than stall
			// every reader on it.
			r.pos = FeedPosition{Entry: rg.entry, Watermark: mark}
			continue
		}
		check := !(r.earliest && int64(rg.entry.MS) < r.startNow-r.s.readable().Milliseconds()+(announceDelayBound+clockSlack).Milliseconds())
		start := rg.start
		for first := true; start.Less(rg.to); first = false {
			var tw logWindow
			var err error
			if first {
				tw, err = f0.w, f0.err
			} else {
				tw, err = r.s.readLog(ctx, r.sp, rg.tenant, start.Next().String(), rg.to.String(), r.s.opts.ReadBatch)
			}
			if err != nil {
				return false, w.Now, err
			}
			if check && r.s.rangeLost(start, tw.First, rg.entry, tw.Now) {
				return false, w.Now, r.s.expiredErr(ctx, "feed")
			}
			check = false
			var evs []*cyclesv1.Event
			var ids []ID
			if first {
				ids, evs, err = f0.ids, f0.evs, f0.convErr
			} else {
				ids, evs, err = convert(r.f, rg.tenant, tw)
			}
			if err != nil {
				return false, w.Now, err
			}
			for k, id := range ids {
				if id == rg.to {
					r.pos = FeedPosition{Entry: rg.entry, Watermark: mark}
				} else {
					r.pos = FeedPosition{Entry: rg.entry, In: id, Partial: true, Watermark: mark}
				}
				ev := evs[k]
				if ev != nil {
					ev.Cursor = EncodeFeedCursor(r.pos)
				}
				stop, err := fn(ev, ev != nil)
				if err != nil || stop {
					return false, w.Now, err
				}
				start = id
			}
			if !tw.more {
				break // the range is done (or the rest of it was trimmed)
			}
		}
		r.pos = FeedPosition{Entry: rg.entry, Watermark: mark}
	}
	caughtUp = !more
	if caughtUp && w.Now > r.pos.Watermark {
		// Read the whole feed at Redis time w.Now.
		r.pos.Watermark = w.Now
	}
	return caughtUp, w.Now, nil
}

// readFeed reads up to feedBatch feed entries from from ("-" or an id,
// inclusive): Redis's, and with an archive, below Redis's oldest entry, the
// archive's first (as readLog does for a tenant log). more: the read was
// full, entries after it may wait.
func (r *feedReader) readFeed(ctx context.Context, from string) (window, bool, error) {
	w, err := r.s.r.readStream(ctx, keys.Feed, from, "+", feedBatch)
	if err != nil {
		return window{}, false, err
	}
	more := len(w.Entries) >= feedBatch
	if r.s.opts.ArchivedStream == nil || !belowRedis(from, w.First) {
		return w, more, nil
	}
	older, err := r.s.archivedIn(ctx, keys.Feed, from, "+", w.First, feedBatch)
	if err != nil {
		if ctx.Err() != nil {
			return window{}, false, ctx.Err()
		}
		return window{}, false, archiveUnavailable(err)
	}
	if len(older) > 0 {
		merged := older
		merged = append(merged, w.Entries...)
		if len(merged) >= feedBatch {
			merged, more = merged[:feedBatch], true
		}
		w.Entries = merged
	}
	return w, more, nil
}

// feedRange is one parsed feed entry: tenant's events in (start, to].
type feedRange struct {
	entry  ID
	tenant string
	start  ID
	to     ID
	valid  bool
}

func parseRange(fe entry) (feedRange, error) {
	id, err := ParseID(fe.ID)
	if err != nil {
		return feedRange{}, err
	}
	rg := feedRange{entry: id, tenant: fe.F["t"]}
	from, err1 := ParseID(fe.F["from"])
	to, err2 := ParseID(fe.F["to"])
	if rg.tenant != "" && err1 == nil && err2 == nil {
		rg.start, rg.to, rg.valid = from, to, true
	}
	return rg, nil
}

// prefetchRanges is how many ranges' first windows are read ahead: the bound
// of a feed reader's extra memory (prefetchRanges x ReadBatch events).
const prefetchRanges = 8

// prefetcher reads the first window of ranges[i] ahead of delivery, at most
// prefetchRanges beyond the one being delivered.
type prefetcher struct {
	ctx    context.Context
	cancel context.CancelFunc
	s      *Service
	f      filter
	sp     *streamPace
	ranges []feedRange
	slots  []chan fetched
	next   int
}

type fetched struct {
	w       logWindow
	err     error
	ids     []ID
	evs     []*cyclesv1.Event
	convErr error
}

func newPrefetcher(ctx context.Context, s *Service, f filter, sp *streamPace, ranges []feedRange) *prefetcher {
	ctx, cancel := context.WithCancel(ctx)
	p := &prefetcher{ctx: ctx, cancel: cancel, s: s, f: f, sp: sp, ranges: ranges, slots: make([]chan fetched, len(ranges))}
	for p.next < len(ranges) && p.next < prefetchRanges {
		p.launch()
	}
	return p
}

func (p *prefetcher) launch() {
	i := p.next
	p.next++
	rg := p.ranges[i]
	ch := make(chan fetched, 1)
	p.slots[i] = ch
	if !rg.valid || !rg.start.Less(rg.to) {
		ch <- fetched{}
		return
	}
	go func() {
		w, err := p.s.readLog(p.ctx, p.sp, rg.tenant, rg.start.Next().String(), rg.to.String(), p.s.opts.ReadBatch)
		f := fetched{w: w, err: err}
		if err == nil {
			// Converting here, off the delivering goroutine, spreads the
			// per-event work over the prefetched ranges.
			f.ids, f.evs, f.convErr = convert(p.f, rg.tenant, w)
		}
		ch <- f
	}()
}

// get waits for the first window of ranges[i] (read and converted) and
// reads one more ahead.
func (p *prefetcher) get(i int) fetched {
	if p.next < len(p.ranges) {
		p.launch()
	}
	return <-p.slots[i]
}

// convert parses the ids of a window and builds the events the filter keeps
// (nil for the others). The filter runs on the stored type, category and
// scope (the fields toEvent copies) before the event is built: an operator
// feed is usually selective (only expiries), and building an event (its data
// Struct) is most of the per-event cost. The event's cursor is left to the
// caller.
func convert(f filter, tenant string, w logWindow) ([]ID, []*cyclesv1.Event, error) {
	ids := make([]ID, len(w.Entries))
	evs := make([]*cyclesv1.Event, len(w.Entries))
	for k, te := range w.Entries {
		id, err := ParseID(te.ID)
		if err != nil {
			return nil, nil, err
		}
		ids[k] = id
		if !f.match(&cyclesv1.Event{EventType: te.F["type"], Category: te.F["cat"], Scope: te.F["scope"], CorrelationId: te.F["corr"]}) {
			continue
		}
		evs[k] = buildEvent(tenant, te)
	}
	return ids, evs, nil
}

// stop abandons the reads still in flight.
func (p *prefetcher) stop() { p.cancel() }

// rangeLost reports whether retention may have trimmed events of a feed
// range that the reader has not seen: the tenant log no longer holds the
// range's start (its oldest entry is after start), and the range's feed entry
// is old enough that events announced in it may be older than the retention
// horizon. A tenant's first range starts at 0-0 and covers its whole retained
// log, so it is never lost.
func (s *Service) rangeLost(start ID, first string, entry ID, now int64) bool {
	if first == "" && s.opts.ArchivedStream == nil || start == (ID{}) {
		return false
	}
	if !belowRedis(start.Next().String(), first) {
		return false
	}
	// Below Redis's oldest entry the range is read from the archive, if
	// there is one: then only the archive's retention can have dropped it.
	if s.readable() <= 0 {
		return false
	}
	horizon := now - s.readable().Milliseconds()
	return int64(entry.MS)-(announceDelayBound+clockSlack).Milliseconds() < horizon
}

// watchAll is Watch over the all-tenant feed.
func (s *Service) watchAll(ctx context.Context, f filter, req *cyclesv1.WatchEventsRequest, send func(*cyclesv1.WatchEventsResponse) error) error {
	// Paced like a tenant stream (pace.go), with the feed's own rates: one
	// bucket per stream and one for every feed stream and listing on this
	// replica.
	sp := s.feedPace.open(allFeed)
	defer sp.close()
	r := &feedReader{s: s, f: f, sp: sp}
	switch req.GetStart() {
	case cyclesv1.StartPosition_START_POSITION_CURSOR:
		p, err := DecodeFeedCursor("cursor", req.GetCursor())
		if err != nil {
			return err
		}
		r.pos = p
	case cyclesv1.StartPosition_START_POSITION_EARLIEST:
		r.fromStart, r.earliest = true, true
	default:
		w, err := s.r.readStream(ctx, keys.Feed, "+", "+", 1)
		if err != nil {
			return err
		}
		r.pos.Watermark = w.Now
		last := w.Last
		if last == "" && s.opts.ArchivedStream != nil {
			// Redis holds none of the feed: start after the archive's newest.
			if last, err = s.newestArchived(ctx, keys.Feed); err != nil {
				return err
			}
		}
		if last != "" {
			if r.pos.Entry, err = ParseID(last); err != nil {
				return err
			}
		}
	}

	s.active.Add(ctx, 1)
	defer s.active.Add(context.WithoutCancel(ctx), -1)
	out := s.newSender(ctx, send)
	defer out.close()

	watchAttr := metric.WithAttributes(attribute.String("rpc", "watch_all"))
	hb := time.NewTimer(s.opts.Heartbeat)
	defer hb.Stop()
	heartbeatDue := false
	retries := 0
	for {
		caughtUp, now, err := r.step(ctx, func(ev *cyclesv1.Event, matched bool) (bool, error) {
			if !matched {
				return false, nil
			}
			if err := out.send(&cyclesv1.WatchEventsResponse{Item: &cyclesv1.WatchEventsResponse_Event{Event: ev}}); err != nil {
				return true, err
			}
			s.delivered.Add(ctx, 1, watchAttr)
			hb.Reset(s.opts.Heartbeat)
			return false, nil
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// A read that timed out on a busy Redis is retried from the
			// position reached (reads change nothing) a few times before
			// the client is told to resume.
			if apierr.HasCode(err, apierr.Unavailable) && retries < maxReadRetries {
				retries++
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Duration(retries) * 100 * time.Millisecond):
				}
				continue
			}
			return err
		}
		retries = 0
		if !caughtUp {
			continue
		}
		if heartbeatDue {
			hbMsg := &cyclesv1.Heartbeat{ServerTimeMs: now, Cursor: EncodeFeedCursor(r.pos)}
			// Counted when handed to the sender: the client may read it
			// before this goroutine runs again.
			s.heartbeats.Add(ctx, 1)
			if err := out.send(&cyclesv1.WatchEventsResponse{Item: &cyclesv1.WatchEventsResponse_Heartbeat{Heartbeat: hbMsg}}); err != nil {
				return sendErr(ctx, err)
			}
			heartbeatDue = false
			hb.Reset(s.opts.Heartbeat)
		}
		ch, release := s.feedTail.wait(r.pos.Entry)
		select {
		case <-ctx.Done():
			release()
			return nil
		case err := <-out.failed():
			release()
			return sendErr(ctx, err)
		case <-ch:
		case <-hb.C:
			heartbeatDue = true
		}
		release()
	}
}

// listAll is List over the all-tenant feed: at most limit events, scanning at
// most 4 x limit tenant log entries.
func (s *Service) listAll(ctx context.Context, f filter, req *cyclesv1.ListEventsRequest, limit int) (*cyclesv1.ListEventsResponse, error) {
	// A listing pays from the feed's shared bucket like a stream, so paging
	// the feed in a loop replays it no faster than watching it.
	sp := s.feedPace.open(allFeed)
	defer sp.close()
	r := &feedReader{s: s, f: f, sp: sp, fromStart: true}
	if req.GetCursor() != "" {
		p, err := DecodeFeedCursor("cursor", req.GetCursor())
		if err != nil {
			return nil, err
		}
		r.pos, r.fromStart = p, false
	} else {
		r.earliest = true
		if req.FromMs != nil {
			// A range reaches the feed after its events, so feed entries
			// older than from_ms (minus clock slack between shards) hold only
			// older events.
			if ms := req.GetFromMs() - clockSlack.Milliseconds(); ms > 0 {
				r.seekFrom = ID{MS: uint64(ms)}.String()
			}
		}
	}
	resp := &cyclesv1.ListEventsResponse{}
	scanned, budget := 0, 4*limit
	more := false
	for steps := 0; !more; steps++ {
		if steps == 8 {
			// Bounded work per call, like the per-tenant scan.
			more = true
			break
		}
		caughtUp, _, err := r.step(ctx, func(ev *cyclesv1.Event, matched bool) (bool, error) {
			scanned++
			if matched && !(req.FromMs != nil && ev.GetTimestampMs() < req.GetFromMs()) && !(req.ToMs != nil && ev.GetTimestampMs() > req.GetToMs()) {
				resp.Events = append(resp.Events, ev)
			}
			if len(resp.Events) == limit || scanned == budget {
				more = true
				return true, nil
			}
			return false, nil
		})
		if err != nil {
			return nil, err
		}
		if caughtUp && !more {
			break
		}
		if scanned >= budget {
			more = true
		}
	}
	if more {
		resp.HasMore = true
		resp.NextCursor = EncodeFeedCursor(r.pos)
	}
	s.delivered.Add(ctx, int64(len(resp.Events)), metric.WithAttributes(attribute.String("rpc", "list_all")))
	return resp, nil
}

package archiver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

var scriptStream = script.Bind[streamKeys, streamArgs]("archive/stream")

type streamKeys struct {
	Stream string `lua:"stream"`
}

type streamArgs struct {
	Position  string `lua:"position"`
	BatchSize int    `lua:"batch_size"`
}

// GlobalAuditTenant is the tenant_id of the archived entries of the global
// audit log (operations that concern no tenant) when an entry names none.
const GlobalAuditTenant = "__admin__"

// maxStreamBatches bounds the batches one round copies from one stream, so
// a stream that grows as fast as it is read cannot hold the round.
const maxStreamBatches = 20

// streamKind is an event or audit stream and where its rows go.
type streamKind int

const (
	kindEvents streamKind = iota
	kindAudit
	// kindFeed is the all-tenant event feed (internal/events doc.go): its
	// entries name a tenant's range of events, so an all-tenant reader
	// past the feed's Redis retention walks the same order (cycles_feed).
	kindFeed
)

// streamEntry is one stream entry: its id and fields in stream order.
type streamEntry struct {
	id    string
	pairs []string
}

// EntryOf maps a stream entry (id, then field/value pairs in stream order)
// of tenant to its archive row: the entry's own id field ("evt_…",
// "aud_…"; the stream id when it has none), its time (the stream id's
// Redis TIME) and, as the body, the whole entry (EncodeEntry), from which
// the reads render exactly what they render from Redis.
func EntryOf(tenant, streamID string, pairs []string) (archive.Entry, error) {
	ms, seq, ok := script.ParseStreamID(streamID)
	if !ok || len(pairs)%2 != 0 || seq > math.MaxInt64 {
		return archive.Entry{}, fmt.Errorf("stream entry %q: malformed", streamID)
	}
	id := streamID
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i] == "id" && pairs[i+1] != "" && pgText(pairs[i+1]) {
			id = pairs[i+1]
			break
		}
	}
	return archive.Entry{TenantID: tenant, ID: id, OccurredAt: time.UnixMilli(int64(ms)).UTC(), Seq: int64(seq),
		Body: EncodeEntry(streamID, pairs)}, nil
}

// EncodeEntry packs a stream entry as (uvarint length, bytes) strings: its
// id, then its field/value pairs in order. Binary-safe.
func EncodeEntry(streamID string, pairs []string) []byte {
	n := len(streamID) + binary.MaxVarintLen32
	for _, p := range pairs {
		n += len(p) + binary.MaxVarintLen32
	}
	out := make([]byte, 0, n)
	out = binary.AppendUvarint(out, uint64(len(streamID)))
	out = append(out, streamID...)
	for _, p := range pairs {
		out = binary.AppendUvarint(out, uint64(len(p)))
		out = append(out, p...)
	}
	return out
}

// DecodeEntry is EncodeEntry's inverse.
func DecodeEntry(b []byte) (streamID string, pairs []string, err error) {
	var parts []string
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", nil, errors.New("archived stream entry: truncated")
		}
		parts = append(parts, string(b[k:k+int(n)]))
		b = b[k+int(n):]
	}
	if len(parts) == 0 || len(parts)%2 != 1 {
		return "", nil, errors.New("archived stream entry: malformed")
	}
	return parts[0], parts[1:], nil
}

// readStream reads up to BatchSize entries of key after position.
func (a *Archiver) readStream(ctx context.Context, key, position string) ([]streamEntry, error) {
	res, err := scriptStream.RunFlat(ctx, a.exec, streamKeys{key}, streamArgs{position, a.opts.BatchSize})
	if err != nil {
		return nil, fmt.Errorf("archive read %s: %w", key, err)
	}
	f := script.NewFlatReader(res)
	_ = f.Int() // now_ms: unused here
	n := f.Count(2)
	out := make([]streamEntry, 0, n)
	for i := 0; i < n; i++ {
		e := streamEntry{id: f.Str()}
		k := f.Count(2)
		e.pairs = make([]string, 0, 2*k)
		for j := 0; j < 2*k; j++ {
			e.pairs = append(e.pairs, f.Str())
		}
		out = append(out, e)
	}
	if err := f.End(); err != nil {
		return nil, fmt.Errorf("archive read %s: %w", key, err)
	}
	return out, nil
}

// drainStream copies the entries of stream key (events or audit of
// tenant; tenant "" is the global audit log) after the archived position,
// a batch per transaction with the new position. Nothing in Redis changes:
// the streams keep their own retention.
func (a *Archiver) drainStream(ctx context.Context, kind streamKind, tenant string, fence int64) (int64, error) {
	var key, name string
	switch {
	case kind == kindFeed:
		key, name = keys.Feed, "feed"
	case kind == kindEvents:
		key, name = keys.Tenant(tenant).Events(), "events/"+tenant
	case tenant == "":
		key, name = keys.AuditLog, "audit/"
	default:
		key, name = keys.Tenant(tenant).Audit(), "audit/"+tenant
	}
	pos, err := a.position(ctx, name)
	if err != nil {
		return 0, err
	}
	var written int64
	for i := 0; i < maxStreamBatches; i++ {
		entries, err := a.readStream(ctx, key, pos)
		if err != nil || len(entries) == 0 {
			return written, err
		}
		batch := archive.Batch{Stream: name, Fence: fence, Position: entries[len(entries)-1].id}
		for _, e := range entries {
			owner := tenant
			if owner == "" || kind == kindFeed {
				owner = GlobalAuditTenant
				if kind == kindFeed {
					owner = "" // a feed entry without a tenant (readers skip it)
				}
				for j := 0; j+1 < len(e.pairs); j += 2 {
					if e.pairs[j] == "t" && e.pairs[j+1] != "" && pgText(e.pairs[j+1]) {
						owner = e.pairs[j+1]
					}
				}
			}
			row, err := EntryOf(owner, e.id, e.pairs)
			if err != nil {
				return written, err
			}
			switch kind {
			case kindEvents:
				batch.Events = append(batch.Events, row)
			case kindFeed:
				batch.Feed = append(batch.Feed, row)
			default:
				row.Global = tenant == ""
				batch.Audit = append(batch.Audit, row)
			}
		}
		w, err := a.write(ctx, batch)
		if err != nil {
			return written, err
		}
		written += w.Events + w.Audit + w.Feed
		pos = batch.Position
		if len(entries) < a.opts.BatchSize {
			return written, nil
		}
	}
	return written, nil
}

// Stream reads archived entries of the Redis stream key (a tenant's
// events or audit stream, or the global audit log) with ids between lo and
// hi inclusive ("-", "+": open; "<ms>" or "<ms>-<seq>"), at most n, in
// stream order (newest first when desc), each as the Redis read scripts
// return it: the stream id, then the field/value pairs.
func (r Reader) Stream(ctx context.Context, key string, desc bool, hi, lo string, n int) ([][]string, error) {
	q := archive.EntryQuery{Desc: desc, Limit: n}
	switch {
	case key == keys.Feed:
		q.Feed = true
	case key == keys.AuditLog:
		q.Audit, q.Global = true, true
	case strings.HasSuffix(key, ":audit"):
		q.Audit = true
		q.Tenant = tenantOfKey(key)
	case strings.HasSuffix(key, ":events"):
		q.Tenant = tenantOfKey(key)
	}
	if !q.Global && !q.Feed && (q.Tenant == "" || (q.Audit && keys.Tenant(q.Tenant).Audit() != key) ||
		(!q.Audit && keys.Tenant(q.Tenant).Events() != key)) {
		return nil, fmt.Errorf("archive read: %q is no archived stream", key)
	}
	for _, b := range []struct {
		s    string
		high bool
		dst  **archive.StreamID
	}{{lo, false, &q.Lo}, {hi, true, &q.Hi}} {
		if b.s == "-" || b.s == "+" {
			continue
		}
		id, err := archive.ParseStreamID(b.s, b.high)
		if err != nil {
			return nil, err
		}
		*b.dst = &id
	}
	es, err := r.Store.ListEntries(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make([][]string, 0, len(es))
	for _, e := range es {
		sid, pairs, err := DecodeEntry(e.Body)
		if err != nil {
			return nil, err
		}
		out = append(out, append([]string{sid}, pairs...))
	}
	return out, nil
}

// Event finds an archived event of tenant by its id: the stream id, then
// the field/value pairs (false: not archived).
func (r Reader) Event(ctx context.Context, tenant, id string) ([]string, bool, error) {
	e, ok, err := r.Store.GetEvent(ctx, tenant, id)
	if err != nil || !ok {
		return nil, false, err
	}
	sid, pairs, err := DecodeEntry(e.Body)
	if err != nil {
		return nil, false, err
	}
	return append([]string{sid}, pairs...), true, nil
}

// tenantOfKey is the tenant of a tenant key ("<prefix>{t:<tenant>}:<name>").
func tenantOfKey(key string) string {
	_, rest, ok := strings.Cut(key, "{t:")
	if !ok {
		return ""
	}
	t, _, ok := strings.Cut(rest, "}:")
	if !ok {
		return ""
	}
	return t
}

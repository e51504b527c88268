package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	pagecursor "github.com/cyclesgo/cycles-go/internal/cursor"

	"golang.org/x/sync/errgroup"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
)

// Listing bounds.
const (
	DefaultListLimit = 50
	MaxListLimit     = 200
	// MaxListFanout is how many tenants a listing without tenant_id merges;
	// beyond it the caller must name the tenant.
	MaxListFanout = 1000
	// maxScanPerStream bounds the entries one page examines in one stream:
	// a filtered page may be short (has_more set) but never unbounded.
	maxScanPerStream = 1000
	readBatch        = 200
	readConcurrency  = 16
	// maxSeq is the largest sequence part of a stream id.
	maxSeq = "18446744073709551615"
)

// pos is a place in the merged order: a stream id and its stream. The
// listing is newest first: by id, then by stream key, both descending.
type pos struct {
	ms, seq uint64
	stream  string
}

func (p pos) less(q pos) bool {
	if p.ms != q.ms {
		return p.ms < q.ms
	}
	if p.seq != q.seq {
		return p.seq < q.seq
	}
	return p.stream < q.stream
}

func (p pos) id() string { return fmt.Sprintf("%d-%d", p.ms, p.seq) }

// before is the stream id just before p's id ("" when there is none).
func (p pos) before() string {
	switch {
	case p.seq > 0:
		return fmt.Sprintf("%d-%d", p.ms, p.seq-1)
	case p.ms > 0:
		return fmt.Sprintf("%d-%s", p.ms-1, maxSeq)
	}
	return ""
}

func (p pos) cursor() string {
	return pagecursor.Encode(p.id() + " " + p.stream)
}

func parseCursor(c string) (pos, error) {
	raw, err := pagecursor.Decode("cursor", c)
	if err != nil {
		return pos{}, err
	}
	bad := pagecursor.Invalid("cursor")
	id, stream, ok := strings.Cut(raw, " ")
	ms, seq, okID := script.ParseStreamID(id)
	if !ok || !okID || (stream != keys.AuditLog && !strings.HasSuffix(stream, ":audit")) {
		return pos{}, bad
	}
	return pos{ms: ms, seq: seq, stream: stream}, nil
}

// entry is one stream entry read back.
type entry struct {
	at pos
	f  map[string]string
}

// matcher is a listing's filter.
type matcher struct {
	req                                 *cyclesv1.ListAuditLogsRequest
	ops, types, codes, exclude          map[string]bool
	search                              string
	hasStatus, hasMin, hasMax           bool
	status, statusMin, statusMax, limit int
}

// newMatcher builds the filter of req (validated by internal/validate: list
// sizes, status bounds, lengths).
func newMatcher(req *cyclesv1.ListAuditLogsRequest) *matcher {
	set := func(vs []string) map[string]bool {
		if len(vs) == 0 {
			return nil
		}
		out := make(map[string]bool, len(vs))
		for _, v := range vs {
			out[v] = true
		}
		return out
	}
	m := &matcher{req: req, search: strings.ToLower(req.GetSearch()),
		ops: set(req.GetOperations()), types: set(req.GetResourceTypes()),
		codes: set(req.GetErrorCodes()), exclude: set(req.GetErrorCodesExclude())}
	m.hasStatus, m.hasMin, m.hasMax = req.Status != nil, req.StatusMin != nil, req.StatusMax != nil
	m.status, m.statusMin, m.statusMax = int(req.GetStatus()), int(req.GetStatusMin()), int(req.GetStatusMax())
	m.limit = int(req.GetLimit())
	switch {
	case m.limit <= 0:
		m.limit = DefaultListLimit
	case m.limit > MaxListLimit:
		m.limit = MaxListLimit
	}
	return m
}

// resourceID is an entry's resource id as the API shows it: an API key by
// its public id (auth.PublicKeyID), like every key answer.
func resourceID(f map[string]string) string {
	if f["rt"] == ResourceAPIKey {
		return auth.PublicKeyID(f["t"], f["rid"])
	}
	return f["rid"]
}

// keyMatches applies the key_id filter: a public id (auth.PublicKeyID, what
// entries answer with) matches the entry's tenant and local id; a local id
// alone matches the local id (of the tenant_id filter's tenant, when set).
func (m *matcher) keyMatches(f map[string]string) bool {
	want := m.req.GetKeyId()
	switch {
	case want == "":
		return true
	case auth.IsLocalKeyID(want):
		return want == f["k"]
	}
	return want == auth.PublicKeyID(f["t"], f["k"])
}

func (m *matcher) match(f map[string]string) bool {
	r := m.req
	exact := func(want, got string) bool { return want == "" || want == got }
	if !exact(r.GetTenantId(), f["t"]) || !m.keyMatches(f) || !exact(r.GetResourceId(), resourceID(f)) ||
		!exact(r.GetTraceId(), f["tr"]) || !exact(r.GetRequestId(), f["req"]) {
		return false
	}
	if m.ops != nil && !m.ops[f["op"]] || m.types != nil && !m.types[f["rt"]] {
		return false
	}
	ec := f["ec"]
	if m.codes != nil && (ec == "" || !m.codes[ec]) || ec != "" && m.exclude[ec] {
		return false
	}
	st, err := strconv.Atoi(f["st"])
	if (m.hasStatus || m.hasMin || m.hasMax) && (err != nil || st == 0) {
		return false
	}
	if m.hasStatus && st != m.status || m.hasMin && st < m.statusMin || m.hasMax && st > m.statusMax {
		return false
	}
	if m.search != "" {
		hit := false
		for _, k := range []string{"rid", "id", "ec", "op"} {
			if strings.Contains(strings.ToLower(f[k]), m.search) {
				hit = true
				break
			}
		}
		if !hit {
			return false
		}
	}
	return true
}

// ListAuditLogs returns one page of the audit trail, newest first. With a tenant_id it
// reads that tenant's stream (or the non-tenant log for a sentinel); without,
// it merges the non-tenant log with every registered tenant's stream (at most
// MaxListFanout tenants). Each stream is read from the cursor down, at most
// maxScanPerStream entries per page, so a page is bounded work; a page may be
// short with has_more set when filters skip many entries.
func (s *Service) ListAuditLogs(ctx context.Context, req *cyclesv1.ListAuditLogsRequest) (*cyclesv1.ListAuditLogsResponse, error) {
	m := newMatcher(req)
	var after *pos
	if c := req.GetCursor(); c != "" {
		p, err := parseCursor(c)
		if err != nil {
			return nil, err
		}
		after = &p
	}
	streams, err := s.streams(ctx, req.GetTenantId())
	if err != nil {
		return nil, err
	}
	results := make([]streamPage, len(streams))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readConcurrency)
	for i, st := range streams {
		g.Go(func() error {
			var err error
			results[i], err = s.scan(gctx, st, m, after)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// Entries at or above the frontier were examined in every stream that
	// still has unexamined ones; below it, a stream may hide newer matches.
	var frontier *pos
	var all []entry
	for _, r := range results {
		all = append(all, r.matched...)
		if !r.done && (frontier == nil || frontier.less(r.last)) {
			last := r.last
			frontier = &last
		}
	}
	slices.SortFunc(all, func(a, b entry) int {
		switch {
		case b.at.less(a.at):
			return -1
		case a.at.less(b.at):
			return 1
		}
		return 0
	})
	resp := &cyclesv1.ListAuditLogsResponse{}
	var taken []entry
	for _, e := range all {
		if frontier != nil && e.at.less(*frontier) {
			break
		}
		if len(taken) == m.limit {
			resp.HasMore = true
			break
		}
		taken = append(taken, e)
	}
	if frontier != nil {
		resp.HasMore = true
	}
	for _, e := range taken {
		resp.Logs = append(resp.Logs, entryOf(e))
	}
	if resp.HasMore {
		next := frontier
		if len(taken) == m.limit {
			next = &taken[len(taken)-1].at
		}
		if next != nil {
			resp.NextCursor = next.cursor()
		}
	}
	return resp, nil
}

// streams are the audit streams a listing reads.
func (s *Service) streams(ctx context.Context, tenant string) ([]string, error) {
	switch {
	case tenant == AdminTenant || tenant == UnauthTenant:
		return []string{keys.AuditLog}, nil
	case tenant != "":
		if !auth.ValidTenantID(tenant) {
			return nil, nil // no entry can name it
		}
		return []string{keys.Tenant(tenant).Audit()}, nil
	}
	tenants, err := sweeper.TenantPage(ctx, s.exec, "", MaxListFanout+1)
	if err != nil {
		return nil, err
	}
	if len(tenants) > MaxListFanout {
		return nil, apierr.Invalid("tenant_id", "is required on a server with more than %d tenants", MaxListFanout)
	}
	out := []string{keys.AuditLog}
	for _, t := range tenants {
		out = append(out, keys.Tenant(t).Audit())
	}
	return out, nil
}

// streamPage is what one page read from one stream.
type streamPage struct {
	matched []entry
	// done: nothing below last is left within the listing's bounds.
	done bool
	last pos
}

// scan reads stream newest first from below the cursor, keeping the
// matching entries, until it has a page of them, the stream ends, or it has
// examined maxScanPerStream entries.
func (s *Service) scan(ctx context.Context, stream string, m *matcher, after *pos) (streamPage, error) {
	hi := "+"
	if to := m.req.GetToMs(); to > 0 {
		hi = fmt.Sprintf("%d-%s", to, maxSeq)
	}
	if after != nil {
		c := after.id()
		if stream >= after.stream {
			c = after.before()
		}
		if c == "" {
			return streamPage{done: true}, nil
		}
		if hi == "+" || idLess(c, hi) {
			hi = c
		}
	}
	lo := "-"
	if from := m.req.GetFromMs(); from > 0 {
		lo = fmt.Sprintf("%d-0", from)
	}
	var out streamPage
	for examined := 0; ; {
		n := min(readBatch, maxScanPerStream-examined)
		rows, err := s.read(ctx, stream, hi, lo, n)
		if err != nil {
			return streamPage{}, err
		}
		for _, r := range rows {
			out.last = r.at
			if m.match(r.f) {
				out.matched = append(out.matched, r)
			}
		}
		examined += len(rows)
		if len(rows) < n {
			out.done = true
			return out, nil
		}
		if len(out.matched) >= m.limit || examined >= maxScanPerStream {
			return out, nil
		}
		hi = out.last.before()
		if hi == "" {
			out.done = true
			return out, nil
		}
	}
}

// idLess compares two stream ids numerically.
func idLess(a, b string) bool {
	am, as, _ := script.ParseStreamID(a)
	bm, bs, _ := script.ParseStreamID(b)
	return am < bm || am == bm && as < bs
}

// read runs audit/read: up to n entries of stream, newest first, between the
// inclusive ids lo and hi.
func (s *Service) read(ctx context.Context, stream, hi, lo string, n int) ([]entry, error) {
	var rows script.LuaArray[[]string]
	if err := scriptRead.RunInto(ctx, s.exec, &rows, streamKeys{stream}, readArgs{"desc", hi, lo, n}); err != nil {
		return nil, fmt.Errorf("read %s: %w", stream, err)
	}
	if s.archived != nil && len(rows) < n {
		// Redis keeps the stream's newest part: below what it returned
		// (or the whole range when it returned nothing) lies only what
		// retention trimmed, which the archive holds.
		below := hi
		if len(rows) > 0 && len(rows[len(rows)-1]) > 0 {
			ms, seq, ok := script.ParseStreamID(rows[len(rows)-1][0])
			if !ok {
				return nil, fmt.Errorf("read %s: stream id %q", stream, rows[len(rows)-1][0])
			}
			below = pos{ms: ms, seq: seq}.before()
		}
		if below != "" {
			older, err := s.archived(ctx, stream, true, below, lo, n-len(rows))
			if err != nil {
				return nil, fmt.Errorf("read %s from the archive: %w", stream, err)
			}
			rows = append(rows, older...)
		}
	}
	out := make([]entry, 0, len(rows))
	for _, r := range rows {
		if len(r) == 0 {
			continue
		}
		ms, seq, ok := script.ParseStreamID(r[0])
		if !ok {
			continue
		}
		f := make(map[string]string, len(r)/2)
		for i := 1; i+1 < len(r); i += 2 {
			f[r[i]] = r[i+1]
		}
		out = append(out, entry{at: pos{ms: ms, seq: seq, stream: stream}, f: f})
	}
	return out, nil
}

// entryOf is the API form of a stored entry.
func entryOf(e entry) *cyclesv1.AuditLogEntry {
	f := e.f
	st, _ := strconv.Atoi(f["st"])
	out := &cyclesv1.AuditLogEntry{
		LogId: f["id"], TimestampMs: int64(e.at.ms), TenantId: f["t"], KeyId: auth.PublicKeyID(f["t"], f["k"]), UserAgent: f["ua"],
		SourceIp: f["ip"], Operation: f["op"], ResourceType: f["rt"], ResourceId: resourceID(f),
		RequestId: f["req"], TraceId: f["tr"], Status: int32(st), ErrorCode: f["ec"],
	}
	if md := f["md"]; md != "" {
		var m map[string]string
		if json.Unmarshal([]byte(md), &m) == nil && len(m) > 0 {
			out.Metadata = m
		}
	}
	return out
}

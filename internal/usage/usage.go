// Package usage answers usage reports (QueryUsage, GET /v1/admin/usage)
// from the PostgreSQL archive: per time bucket, scope prefix and unit, the
// amounts reserved, committed, released and expired by settled
// reservations, their counts, and the budget denials (docs/archive.md).
// It validates the request and merges the archive's sums; every read of
// PostgreSQL is internal/archive's.
package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/archiver"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// MaxRange is the longest range one report covers (the archive's default
// retention).
const MaxRange = 400 * 24 * time.Hour

// Source is the archive a report reads (internal/archive Store).
type Source interface {
	Usage(ctx context.Context, q archive.UsageQuery) ([]archive.UsageRow, error)
	Denials(ctx context.Context, tenant string, from, to time.Time, fn func(archive.Entry) error) error
}

// Service answers usage reports.
type Service struct{ src Source }

// New returns a Service reading src.
func New(src Source) *Service { return &Service{src: src} }

type key struct {
	bucket int64
	scope  string
	unit   cyclesv1.Unit
}

// QueryUsage answers UsageService.QueryUsage (served by internal/api/usageapi
// as is): docs/archive.md#usage-reports.
func (s *Service) QueryUsage(ctx context.Context, req *cyclesv1.QueryUsageRequest) (*cyclesv1.QueryUsageResponse, error) {
	q, err := query(req)
	if err != nil {
		return nil, err
	}
	rows, err := s.src.Usage(ctx, q)
	if errors.Is(err, archive.ErrUsageOverflow) {
		return nil, apierr.New(apierr.Overflow, "a usage sum exceeds int64: narrow the range or the scope")
	}
	if err != nil {
		return nil, fmt.Errorf("usage of tenant %s: %w", q.Tenant, err)
	}
	out := map[key]*cyclesv1.UsageRow{}
	row := func(k key) *cyclesv1.UsageRow {
		r := out[k]
		if r == nil {
			r = &cyclesv1.UsageRow{BucketStartMs: k.bucket, Scope: k.scope, Unit: k.unit}
			out[k] = r
		}
		return r
	}
	for _, a := range rows {
		r := row(key{a.Bucket.UnixMilli(), a.Scope, scope.ParseUnit(a.Unit)})
		r.Reserved, r.Committed, r.Released, r.Expired, r.DebtIncurred = a.Reserved, a.Committed, a.Released, a.Expired, a.Debt
		r.Reservations, r.Commits, r.Releases, r.Expirations = a.Reservations, a.Commits, a.Releases, a.Expirations
	}
	err = s.src.Denials(ctx, q.Tenant, q.From, q.To, func(e archive.Entry) error {
		_, pairs, err := archiver.DecodeEntry(e.Body)
		if err != nil {
			return err
		}
		f := map[string]string{}
		for i := 0; i+1 < len(pairs); i += 2 {
			f[pairs[i]] = pairs[i+1]
		}
		var data struct {
			Unit string `json:"unit"`
		}
		_ = json.Unmarshal([]byte(f["data"]), &data) // no unit: counted under UNSPECIFIED
		path := f["scope"]
		if !under(path, q.ScopePrefix) || (q.Unit != "" && data.Unit != q.Unit) {
			return nil
		}
		row(key{bucketOf(e.OccurredAt, q.Hourly), prefix(path, q.Depth), scope.ParseUnit(data.Unit)}).Denials++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("denials of tenant %s: %w", q.Tenant, err)
	}
	resp := &cyclesv1.QueryUsageResponse{Rows: make([]*cyclesv1.UsageRow, 0, len(out))}
	for _, r := range out {
		resp.Rows = append(resp.Rows, r)
	}
	sort.Slice(resp.Rows, func(i, j int) bool {
		a, b := resp.Rows[i], resp.Rows[j]
		if a.BucketStartMs != b.BucketStartMs {
			return a.BucketStartMs < b.BucketStartMs
		}
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		return a.Unit < b.Unit
	})
	return resp, nil
}

// query turns req into the archive's query. Its shape (tenant id, scope
// text, depth, enums) was checked by internal/validate before the call;
// here are the checks that need the request's meaning: the range and the
// scope's tenant.
func query(req *cyclesv1.QueryUsageRequest) (archive.UsageQuery, error) {
	t := req.GetTenantId()
	if t == "" {
		return archive.UsageQuery{}, apierr.Invalid("tenant_id", "is required")
	}
	from, to := req.GetFromMs(), req.GetToMs()
	if from <= 0 {
		return archive.UsageQuery{}, apierr.Invalid("from_ms", "is required (Unix ms)")
	}
	if to <= from {
		return archive.UsageQuery{}, apierr.Invalid("to_ms", "must be after from_ms")
	}
	if to-from > MaxRange.Milliseconds() {
		return archive.UsageQuery{}, apierr.Invalid("to_ms", "a report covers at most %d days", int(MaxRange.Hours()/24))
	}
	p := strings.ToLower(req.GetScopePrefix())
	if p != "" && (p != "tenant:"+t && !strings.HasPrefix(p, "tenant:"+t+"/") || strings.HasSuffix(p, "/")) {
		return archive.UsageQuery{}, apierr.Invalid("scope_prefix", "must be a scope of tenant %s (tenant:%s/...)", t, t)
	}
	unit := ""
	if u := req.GetUnit(); u != cyclesv1.Unit_UNIT_UNSPECIFIED {
		unit = scope.UnitKey(u)
	}
	return archive.UsageQuery{Tenant: t, From: time.UnixMilli(from).UTC(), To: time.UnixMilli(to).UTC(),
		Hourly: req.GetBucket() == cyclesv1.UsageBucket_USAGE_BUCKET_HOUR, ScopePrefix: p,
		Depth: int(req.GetScopeDepth()), Unit: unit}, nil
}

// under reports whether path is p or below it (p "" : everything).
func under(path, p string) bool {
	return p == "" || path == p || strings.HasPrefix(path, p+"/")
}

// prefix is path's first depth segments (depth 0: the whole path), as the
// archive's SQL groups them.
func prefix(path string, depth int) string {
	if depth <= 0 {
		return path
	}
	segs := strings.Split(path, "/")
	if len(segs) > depth {
		segs = segs[:depth]
	}
	return strings.Join(segs, "/")
}

func bucketOf(t time.Time, hourly bool) int64 {
	t = t.UTC()
	if hourly {
		return t.Truncate(time.Hour).UnixMilli()
	}
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC).UnixMilli()
}

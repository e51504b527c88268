package cycleshttp

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// Usage reports over UsageService, admin key only: GET /v1/admin/usage
// (tenant_id, from and to as ISO 8601 date-times, bucket hour|day,
// scope_prefix, scope_depth, unit); docs/archive.md#usage-reports.

func (a *API) usageRoutes() {
	a.mux.HandleFunc("GET /v1/admin/usage", a.queryUsage)
}

type usageRowOut struct {
	BucketStart  string `json:"bucket_start"`
	Scope        string `json:"scope"`
	Unit         string `json:"unit"`
	Reserved     int64  `json:"reserved"`
	Committed    int64  `json:"committed"`
	Released     int64  `json:"released"`
	Expired      int64  `json:"expired"`
	DebtIncurred int64  `json:"debt_incurred"`
	Reservations int64  `json:"reservations"`
	Commits      int64  `json:"commits"`
	Releases     int64  `json:"releases"`
	Expirations  int64  `json:"expirations"`
	Denials      int64  `json:"denials"`
}

type usageOut struct {
	Rows []*usageRowOut `json:"rows"`
}

func (a *API) queryUsage(w http.ResponseWriter, r *http.Request) {
	if a.usage == nil {
		a.notServed(w, r, "usage reports need the archive (-archive-dsn) on this server")
		return
	}
	q := r.URL.Query()
	req := &cyclesv1.QueryUsageRequest{TenantId: q.Get("tenant_id"), ScopePrefix: q.Get("scope_prefix")}
	err := func() error {
		for _, p := range []struct {
			name string
			dst  *int64
		}{{"from", &req.FromMs}, {"to", &req.ToMs}} {
			v, err := timeParam(q, p.name)
			if err != nil {
				return err
			}
			if v == nil {
				return apierr.Invalid(p.name, "is required (ISO 8601 date-time)")
			}
			*p.dst = *v
		}
		switch b := strings.ToLower(q.Get("bucket")); b {
		case "", "day":
			req.Bucket = cyclesv1.UsageBucket_USAGE_BUCKET_DAY
		case "hour":
			req.Bucket = cyclesv1.UsageBucket_USAGE_BUCKET_HOUR
		default:
			return apierr.Invalid("bucket", "must be hour or day, got %q", b)
		}
		if s := q.Get("scope_depth"); s != "" {
			n, err := strconv.ParseInt(s, 10, 32)
			if err != nil {
				return apierr.Invalid("scope_depth", "must be an integer, got %q", s)
			}
			req.ScopeDepth = int32(n)
		}
		if s := q.Get("unit"); s != "" {
			v, err := parseEnum("unit", s, unitValues)
			if err != nil {
				return err
			}
			req.Unit = cyclesv1.Unit(v)
		}
		return nil
	}()
	a.serve(w, r, route{cyclesv1.UsageService_QueryUsage_FullMethodName, adminPlane, http.StatusOK}, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.usage.QueryUsage(ctx, req.(*cyclesv1.QueryUsageRequest))
		},
		func(resp any) any {
			rows := resp.(*cyclesv1.QueryUsageResponse).GetRows()
			out := &usageOut{Rows: make([]*usageRowOut, 0, len(rows))}
			for _, u := range rows {
				out.Rows = append(out.Rows, &usageRowOut{BucketStart: isoTime(u.GetBucketStartMs()), Scope: u.GetScope(),
					Unit: scope.UnitKey(u.GetUnit()), Reserved: u.GetReserved(), Committed: u.GetCommitted(),
					Released: u.GetReleased(), Expired: u.GetExpired(), DebtIncurred: u.GetDebtIncurred(),
					Reservations: u.GetReservations(), Commits: u.GetCommits(), Releases: u.GetReleases(),
					Expirations: u.GetExpirations(), Denials: u.GetDenials()})
			}
			return out
		})
}

package cycleshttp

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// Usage reports over UsageService, admin key only: GET /v1/admin/usage
// (tenant_id, from and to as ISO 8601 date-times, bucket hour|day,
// scope_prefix, scope_depth, unit); docs/archive.md#usage-reports.

func (a *API) usageRoutes() []endpoint {
	return []endpoint{
		on(a, "GET /v1/admin/usage", cyclesv1.UsageService_QueryUsage_FullMethodName,
			via(a.usage, cyclesv1.UsageServiceServer.QueryUsage), check(dailyByDefault), usageOf,
			off("usage reports need the archive (-archive-dsn) on this server"),
			query(q("tenant_id"), q("scope_prefix"), qf("from", "from_ms").must(), qf("to", "to_ms").must(),
				q("bucket").with(bucketParam), q("scope_depth"), q("unit"))),
	}
}

// dailyByDefault: a report without bucket is by day.
func dailyByDefault(req *cyclesv1.QueryUsageRequest) error {
	if req.Bucket == cyclesv1.UsageBucket_USAGE_BUCKET_UNSPECIFIED {
		req.Bucket = cyclesv1.UsageBucket_USAGE_BUCKET_DAY
	}
	return nil
}

// bucketParam reads hour or day, in any case.
func bucketParam(name, s string) (protoreflect.Value, error) {
	switch b := strings.ToLower(s); b {
	case "day":
		return protoreflect.ValueOfEnum(cyclesv1.UsageBucket_USAGE_BUCKET_DAY.Number()), nil
	case "hour":
		return protoreflect.ValueOfEnum(cyclesv1.UsageBucket_USAGE_BUCKET_HOUR.Number()), nil
	default:
		return protoreflect.Value{}, apierr.Invalid(name, "must be hour or day, got %q", b)
	}
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

func usageOf(p *cyclesv1.QueryUsageResponse) *usageOut {
	rows := p.GetRows()
	out := &usageOut{Rows: make([]*usageRowOut, 0, len(rows))}
	for _, u := range rows {
		out.Rows = append(out.Rows, &usageRowOut{BucketStart: isoTime(u.GetBucketStartMs()), Scope: u.GetScope(),
			Unit: scope.UnitKey(u.GetUnit()), Reserved: u.GetReserved(), Committed: u.GetCommitted(),
			Released: u.GetReleased(), Expired: u.GetExpired(), DebtIncurred: u.GetDebtIncurred(),
			Reservations: u.GetReservations(), Commits: u.GetCommits(), Releases: u.GetReleases(),
			Expirations: u.GetExpirations(), Denials: u.GetDenials()})
	}
	return out
}

package cycleshttp

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Usage reports over UsageService, admin key only: GET /v1/admin/usage
// (tenant_id, from and to as ISO 8601 date-times, bucket hour|day,
// scope_prefix, scope_depth, unit); docs/archive.md#usage-reports.

func (a *API) usageRoutes() []endpoint {
	return []endpoint{
		on(a, "GET /v1/admin/usage", via(a.svc.Usage, cyclesv1.UsageServiceServer.QueryUsage), check(dailyByDefault), usageReport,
			off("usage reports need the archive (-archive-dsn) on this server"),
			query(q("tenant_id"), q("scope_prefix"), qf("from", "from_ms").must(), qf("to", "to_ms").must(),
				q("bucket").with(bucketParam), q("scope_depth"), q("unit"))),
	}
}

// usageReport is the report's wire shape: the proto's, times as ISO 8601.
var usageReport = shapeOf("rows").nest("rows", shapeOf("bucket_start", "scope", "unit", "reserved", "committed", "released",
	"expired", "debt_incurred", "reservations", "commits", "releases", "expirations", "denials"))

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

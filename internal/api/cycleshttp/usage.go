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

package cycleshttp

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// The audit trail (GET /v1/admin/audit/logs; AuditService on gRPC).

// auditPage is the protocol's AuditLogListResponse: the proto's shape.
var auditPage = page("logs", nil).nest("logs", shapeOf("log_id", "timestamp", "tenant_id", "key_id?", "user_agent?", "source_ip?",
	"operation", "resource_type?", "resource_id?", "request_id?", "trace_id?", "status", "error_code?", "metadata?"))

func newestFirst(name, s string) (protoreflect.Value, error) {
	if d := strings.ToLower(s); d != "desc" {
		return protoreflect.Value{}, apierr.Invalid(name, "only desc (newest first) is supported")
	}
	return protoreflect.Value{}, nil
}

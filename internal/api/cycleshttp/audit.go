package cycleshttp

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// The audit trail (GET /v1/admin/audit/logs; AuditService on gRPC).

func (a *API) auditRoutes() []endpoint {
	return []endpoint{
		// Entries are read newest first; sort keys other than the time are not
		// offered (the spec lets a server ignore sort_by); an ascending order
		// is refused rather than silently reversed.
		on(a, "GET /v1/admin/audit/logs", via(a.svc.Audit, cyclesv1.AuditServiceServer.ListAuditLogs), nil, auditPage,
			off("the audit trail is not enabled on this server"),
			query(q("tenant_id"), q("key_id"), q("resource_id"), q("search"), q("trace_id"), q("request_id"), q("cursor"),
				qf("operation", "operations"), qf("resource_type", "resource_types"), qf("error_code", "error_codes"),
				qf("error_code_exclude", "error_codes_exclude"), q("status"), q("status_min"), q("status_max"),
				qf("from", "from_ms"), qf("to", "to_ms"), qf("sort_dir", "search").with(newestFirst), q("limit"))),
	}
}

// auditPage is the protocol's AuditLogListResponse: the proto's shape.
var auditPage = page("logs", nil).nest("logs", shapeOf("log_id", "timestamp", "tenant_id", "key_id?", "user_agent?", "source_ip?",
	"operation", "resource_type?", "resource_id?", "request_id?", "trace_id?", "status", "error_code?", "metadata?"))

func newestFirst(name, s string) (protoreflect.Value, error) {
	if d := strings.ToLower(s); d != "desc" {
		return protoreflect.Value{}, apierr.Invalid(name, "only desc (newest first) is supported")
	}
	return protoreflect.Value{}, nil
}

package validate

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Audit-trail listing bounds (the governance spec's listAuditLogs).
const (
	auditMaxListItems = 25
	auditMaxSearch    = 128
	auditMaxFilter    = 256
)

// AuditService request validators.
func init() {
	register(func(r *cyclesv1.ListAuditLogsRequest) error {
		for _, l := range []struct {
			field string
			vs    []string
		}{{"operation", r.GetOperations()}, {"resource_type", r.GetResourceTypes()},
			{"error_code", r.GetErrorCodes()}, {"error_code_exclude", r.GetErrorCodesExclude()}} {
			if len(l.vs) > auditMaxListItems {
				return invalid(l.field, "has more than %d values", auditMaxListItems)
			}
			for _, v := range l.vs {
				if err := Text(l.field, v, auditMaxFilter); err != nil {
					return err
				}
			}
		}
		for _, f := range []struct{ field, v string }{{"tenant_id", r.GetTenantId()}, {"key_id", r.GetKeyId()},
			{"resource_id", r.GetResourceId()}, {"trace_id", r.GetTraceId()}, {"request_id", r.GetRequestId()}} {
			if err := Text(f.field, f.v, auditMaxFilter); err != nil {
				return err
			}
		}
		if err := first(
			Text("search", r.GetSearch(), auditMaxSearch),
			Cursor("cursor", r.GetCursor()),
		); err != nil {
			return err
		}
		switch {
		case r.Status != nil && (r.StatusMin != nil || r.StatusMax != nil):
			return invalid("status", "cannot be combined with status_min or status_max")
		case r.StatusMin != nil && (r.GetStatusMin() < 100 || r.GetStatusMin() > 599):
			return invalid("status_min", "must be 100..599")
		case r.StatusMax != nil && (r.GetStatusMax() < 100 || r.GetStatusMax() > 599):
			return invalid("status_max", "must be 100..599")
		case r.StatusMin != nil && r.StatusMax != nil && r.GetStatusMin() > r.GetStatusMax():
			return invalid("status_min", "is greater than status_max")
		case r.GetFromMs() < 0:
			return invalid("from", "must not be before the Unix epoch")
		case r.GetToMs() < 0:
			return invalid("to", "must not be before the Unix epoch")
		case r.GetLimit() < 0 || r.GetLimit() > 200:
			return invalid("limit", "must be 1..200")
		}
		return nil
	})
}

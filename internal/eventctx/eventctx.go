// Package eventctx builds the event context that every event-emitting script
// takes as one ARGV (emit_event in lua/lib/core.lua): who acted, the request
// and trace ids, the stream retention and a fresh id base. It is a leaf: the
// domain packages whose scripts emit events (ledger, admin, sweeper,
// ledgerops) use it without depending on internal/events, which reads the streams.
package eventctx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/reqctx"
)

// DefaultRetention is how long events stay in a tenant's stream.
const DefaultRetention = 7 * 24 * time.Hour

// Emission is the event context every event-emitting script receives as one
// ARGV (see event_emitter in lua/lib/core.lua).
type Emission struct {
	Base        string `json:"base"`
	RetentionMs int64  `json:"retention_ms"`
	Actor       string `json:"actor"`
	KeyID       string `json:"key_id"`
	RequestID   string `json:"request_id"`
	TraceID     string `json:"trace_id"`
	// CorrelationID, when set, is the correlation id of every event the
	// script emits that does not derive its own (WithCorrelation).
	CorrelationID string `json:"correlation_id,omitempty"`
	// Audit, when the call is an audited operation, is the audit entry a
	// mutating script appends on success (audit_ok in lua/lib/audit.lua).
	Audit *Audit `json:"audit,omitempty"`
}

// Audit is what an audit entry records besides the request and trace ids of
// the Emission that carries it. The transport's audit step puts it in the
// context of every audited call (internal/audit); each mutating script
// appends it to the tenant's audit stream in the same run as its change, so
// no change exists without its record. Field names are short: they are the
// stream entry's field names too.
type Audit struct {
	// Tenant is the entry's tenant_id: the tenant acted on, or a sentinel
	// (__admin__, __unauth__) when none applies.
	Tenant string `json:"t"`
	// RetentionMs bounds the stream: older entries are trimmed on append.
	RetentionMs  int64  `json:"ret"`
	KeyID        string `json:"k,omitempty"`
	SourceIP     string `json:"ip,omitempty"`
	UserAgent    string `json:"ua,omitempty"`
	Operation    string `json:"op"`
	ResourceType string `json:"rt,omitempty"`
	ResourceID   string `json:"rid,omitempty"`
	// Status is the HTTP status of the answer (the success status until a
	// refusal replaces it); ErrorCode the refusal's code.
	Status    int    `json:"st"`
	ErrorCode string `json:"ec,omitempty"`
	// Metadata is free-form context (a bulk action's key, a refusal's message).
	Metadata map[string]string `json:"md,omitempty"`
}

type auditKey struct{}

type correlationKey struct{}

// WithCorrelation gives every event emitted under ctx that has no
// correlation id of its own the id corr: a bulk action's rows share one
// (docs/protocol.md#correlation-ids).
func WithCorrelation(ctx context.Context, corr string) context.Context {
	return context.WithValue(ctx, correlationKey{}, corr)
}

// CorrelationFrom returns the correlation id WithCorrelation set, or "".
func CorrelationFrom(ctx context.Context) string {
	s, _ := ctx.Value(correlationKey{}).(string)
	return s
}

// WithAudit marks ctx as an audited call: every event context built from it
// carries a.
func WithAudit(ctx context.Context, a *Audit) context.Context {
	return context.WithValue(ctx, auditKey{}, a)
}

// AuditFrom returns the audit record of the call, or nil.
func AuditFrom(ctx context.Context) *Audit {
	a, _ := ctx.Value(auditKey{}).(*Audit)
	return a
}

// Arg builds the event-context ARGV of one script call from the request
// context: actor from the principal (system when there is none), request and
// trace ids, and a fresh random id base.
func Arg(ctx context.Context, retention time.Duration) string {
	defaults.Set(&retention, DefaultRetention)
	var b [7]byte
	_, _ = rand.Read(b[:])
	e := Emission{Base: hex.EncodeToString(b[:]), RetentionMs: retention.Milliseconds(), Actor: "system",
		RequestID: reqctx.RequestID(ctx), TraceID: reqctx.TraceID(ctx), CorrelationID: CorrelationFrom(ctx), Audit: AuditFrom(ctx)}
	if p, ok := auth.FromContext(ctx); ok {
		switch {
		case p.Admin:
			e.Actor = "admin"
		case p.Tenant != "":
			e.Actor, e.KeyID = "api_key", p.KeyID
		}
	}
	out, _ := json.Marshal(e)
	return string(out)
}

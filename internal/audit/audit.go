// Package audit is the audit trail of cyclesd: who changed what, from where,
// and how it ended (docs/operations.md#audit-trail).
//
// Every mutation of the admin plane, the ops plane and the runtime calls the
// admin key makes for a tenant is an audited operation (operations.go). The
// transport's audit step (Intercept, in the gRPC interceptor chain every wire
// goes through) puts the entry's fields into the call's context; the event
// context every mutating script receives carries them (internal/eventctx), and
// the script appends the entry to the tenant's audit stream in the same run as
// the change it records (lua/lib/audit.lua): no change without its record, even
// across a crash. A refusal changes nothing, so its entry is appended here,
// after the call, by one small script (audit/append). Refused authentications
// are aggregated per peer and minute (audit/auth_refused) so a flood of bad
// keys cannot fill Redis.
//
// Entries are stream entries: append-only (no API alters or deletes one),
// ordered by Redis TIME, trimmed by age (-audit-retention). A tenant's entries
// live in its hash slot (cy:{t:T}:audit); entries that concern no tenant in
// cy:{audit}:log. List reads them back with the spec's filters.
package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/reqctx"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
)

// Sentinel tenant ids of entries that concern no single tenant. Real tenant
// ids never contain '_' twice at both ends, so neither can collide with one.
const (
	// AdminTenant marks an admin-key operation on no tenant (sweeper
	// controls, a refusal naming no existing tenant). It is also the key_id of
	// the admin key's entries.
	AdminTenant = "__admin__"
	// UnauthTenant marks a refused authentication.
	UnauthTenant = "__unauth__"
)

// Defaults.
const (
	// DefaultRetention is how long an entry is kept (-audit-retention).
	DefaultRetention = 400 * 24 * time.Hour
	// DefaultAuthFailPeers bounds the peers whose refused authentications
	// are counted separately in one minute; the rest share one counter.
	DefaultAuthFailPeers = 1000
	// maxUserAgent bounds the user agent kept in an entry.
	maxUserAgent = 256
	// writeTimeout bounds an entry written after the call (refusals).
	writeTimeout = 2 * time.Second
)

// The audit scripts (lua/audit/<name>.lua).
var (
	scriptAppend      = script.Bind[streamKeys, appendArgs]("audit/append")
	scriptAuthRefused = script.Bind[authRefusedKeys, authRefusedArgs]("audit/auth_refused")
	// scriptRead reads one page of an audit stream in time order (asc or
	// desc) from an inclusive id bound: the listing's reader.
	scriptRead = script.Bind[streamKeys, readArgs]("audit/read")
)

// streamKeys are the KEYS of the scripts on one audit stream.
type streamKeys struct {
	Stream string `lua:"audit_stream"`
}

type appendArgs struct {
	EventCtx string `lua:"event_ctx"` // carries the entry (argOf)
}

type authRefusedKeys struct {
	Log            string `lua:"audit_log"`
	AuthFailPrefix string `lua:"authfail_prefix"`
}

type authRefusedArgs struct {
	EventCtx string `lua:"event_ctx"`
	Peer     string `lua:"peer"`
	MaxPeers int    `lua:"max_peers"`
}

type readArgs struct {
	Order  string `lua:"order"` // desc | asc
	Newest string `lua:"newest"`
	Oldest string `lua:"oldest"`
	Count  int    `lua:"count"`
}

// Options configure a Service.
type Options struct {
	// Retention is how long entries are kept (0 = DefaultRetention).
	Retention time.Duration
	// AuthFailPeers bounds the peers counted separately per minute (0 =
	// DefaultAuthFailPeers).
	AuthFailPeers int
	// MeterProvider receives the audit counters (nil = no-op).
	MeterProvider metric.MeterProvider
	// Logger reports entries that could not be written (nil = none).
	Logger *zap.Logger
	// ArchivedStream, when set, reads an audit stream's entries from the
	// archive (internal/archiver Reader.Stream), in audit/read's form:
	// listings then go on past Redis retention from it.
	ArchivedStream func(ctx context.Context, key string, desc bool, hi, lo string, n int) ([][]string, error)
}

// Service writes and lists audit entries.
type Service struct {
	exec      *script.Executor
	retention time.Duration
	peers     int
	log       *zap.Logger
	archived  func(ctx context.Context, key string, desc bool, hi, lo string, n int) ([][]string, error)
	written   metric.Int64Counter
	failed    metric.Int64Counter
}

// New builds the audit service on exec.
func New(exec *script.Executor, opts Options) *Service {
	s := &Service{exec: exec, retention: opts.Retention, peers: opts.AuthFailPeers, log: opts.Logger,
		archived: opts.ArchivedStream}
	defaults.Set(&s.retention, DefaultRetention)
	defaults.Set(&s.peers, DefaultAuthFailPeers)
	if s.log == nil {
		s.log = zap.NewNop()
	}
	mt := telemetry.Meter(opts.MeterProvider, "audit")
	s.written = telemetry.MustCounter(mt, "cycles.audit.appended", "Audit entries appended outside mutating scripts (attribute kind: refusal, success, auth)")
	s.failed = telemetry.MustCounter(mt, "cycles.audit.append_failures", "Audit entries that could not be appended (attribute kind)")
	return s
}

// Intercept is the audit step of the unary interceptor chain, right after
// authentication: an audited call runs with its entry in the context (the
// mutating script appends it on success); a refused one gets its entry here.
func (s *Service) Intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	op, ok := operations[info.FullMethod]
	if p, _ := auth.FromContext(ctx); !ok || onBehalf()[info.FullMethod] && !p.Admin {
		return h(ctx, req)
	}
	a := s.entry(ctx, op, req)
	resp, err := h(eventctx.WithAudit(ctx, a), req)
	switch {
	case err != nil:
		s.refused(ctx, a, err)
	case !op.script:
		s.append(ctx, "success", streamOf(a), a)
	}
	return resp, err
}

// entry is the audit entry of one call, before it runs.
func (s *Service) entry(ctx context.Context, op operation, req any) *eventctx.Audit {
	a := &eventctx.Audit{RetentionMs: s.retention.Milliseconds(), Operation: op.name,
		ResourceType: op.resource, Status: op.status}
	tenant, id := target(op.resource, req)
	a.ResourceID = id
	p, _ := auth.FromContext(ctx)
	if tenant == "" {
		tenant = p.Tenant
	}
	switch {
	case tenant != "":
		a.Tenant = tenant
	case p.Admin:
		a.Tenant = AdminTenant
	default:
		a.Tenant = UnauthTenant
	}
	if p.Admin {
		a.KeyID = AdminTenant
	} else {
		a.KeyID = p.KeyID
	}
	a.SourceIP, a.UserAgent = origin(ctx)
	return a
}

// origin is the caller's address (without port) and user agent.
func origin(ctx context.Context) (ip, ua string) {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if ta, ok := p.Addr.(*net.TCPAddr); ok {
			ip = ta.IP.String()
		} else if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
			ip = host
		}
	}
	ua = auth.FirstMetadata(ctx, "user-agent")
	if len(ua) > maxUserAgent {
		ua = ua[:maxUserAgent]
	}
	return ip, ua
}

// streamOf is the stream an entry written outside a script goes to: its
// tenant's, or the non-tenant log for a sentinel or a name that is no tenant.
func streamOf(a *eventctx.Audit) string {
	if a.Tenant == AdminTenant || a.Tenant == UnauthTenant || !auth.ValidTenantID(a.Tenant) {
		return keys.AuditLog
	}
	return keys.Tenant(a.Tenant).Audit()
}

// refused appends the entry of a refused call.
func (s *Service) refused(ctx context.Context, a *eventctx.Audit, err error) {
	code, msg := codeOf(err)
	r := *a
	r.Status = code.HTTPStatus()
	r.ErrorCode = string(code)
	if msg != "" {
		r.Metadata = map[string]string{"message": msg}
	}
	sentinel := r.Tenant == AdminTenant || r.Tenant == UnauthTenant
	if !sentinel && (code == apierr.TenantNotFound || !auth.ValidTenantID(r.Tenant)) {
		// No such tenant: the entry goes to the non-tenant log (no stream in
		// the slot of a name anyone can type), naming what was asked for.
		if r.Metadata == nil {
			r.Metadata = map[string]string{}
		}
		r.Metadata["tenant_id"] = r.Tenant
		r.Tenant = AdminTenant
		if p, ok := auth.FromContext(ctx); ok && !p.Admin && p.Tenant != "" {
			r.Tenant = p.Tenant
		}
	}
	stream := streamOf(&r)
	s.append(ctx, "refusal", stream, &r)
}

// append writes one entry outside a mutating script. Failing to write it
// fails nothing (the call's answer is already decided); it is logged and
// counted.
func (s *Service) append(ctx context.Context, kind, stream string, a *eventctx.Audit) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	arg := argOf(ctx, a)
	if err := scriptAppend.RunInto(ctx, s.exec, nil, streamKeys{stream}, appendArgs{arg}); err != nil {
		s.failed.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", kind)))
		s.log.Warn("audit entry not written", zap.String("operation", a.Operation), zap.Error(err))
		return
	}
	s.written.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", kind)))
}

// argOf is the event-context ARGV carrying a (the same shape the mutating
// scripts receive).
func argOf(ctx context.Context, a *eventctx.Audit) string {
	var b [7]byte
	_, _ = rand.Read(b[:])
	out, _ := json.Marshal(eventctx.Emission{Base: hex.EncodeToString(b[:]), Actor: "system",
		RequestID: reqctx.RequestID(ctx), TraceID: reqctx.TraceID(ctx), Audit: a})
	return string(out)
}

// AuthRefused records a refused authentication from the caller of ctx
// (aggregated per peer and minute: audit/auth_refused). peerKey is the
// caller's throttling identity (IPv4 address or IPv6 /64).
func (s *Service) AuthRefused(ctx context.Context, peerKey string, err error) {
	code, msg := codeOf(err)
	a := &eventctx.Audit{Tenant: UnauthTenant, RetentionMs: s.retention.Milliseconds(),
		Operation: "authenticate", Status: code.HTTPStatus(), ErrorCode: string(code)}
	a.SourceIP, a.UserAgent = origin(ctx)
	if msg != "" {
		a.Metadata = map[string]string{"message": msg}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	if reqctx.RequestID(ctx) == "" {
		ctx = reqctx.WithRequestID(ctx, reqctx.RequestIDOrNew(auth.FirstMetadata(ctx, auth.RequestIDHeader)))
	}
	var out struct {
		Recorded bool `json:"recorded"`
	}
	if err := scriptAuthRefused.RunInto(ctx, s.exec, &out, authRefusedKeys{keys.AuditLog, keys.AuthFailPrefix},
		authRefusedArgs{argOf(ctx, a), peerKey, s.peers}); err != nil {
		s.failed.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", "auth")))
		s.log.Warn("refused authentication not counted", zap.Error(err))
		return
	}
	if out.Recorded {
		s.written.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", "auth")))
	}
}

// codeOf is the protocol code and message of a refusal, whatever its form
// (*apierr.Error from the domain, a gRPC status from the chain).
func codeOf(err error) (apierr.Code, string) {
	code := apierr.CodeOf(err)
	if ae, ok := apierr.As(err); ok {
		return code, ae.Message
	}
	if _, _, ok := apierr.FromStatus(err); ok || code != apierr.InternalError {
		st, _ := status.FromError(err)
		return code, st.Message()
	}
	return code, "internal error"
}

// Refused records the refusal err of the audited work whose entry ctx
// carries (a bulk action's row, which is not a call of its own).
func (s *Service) Refused(ctx context.Context, err error) {
	if a := eventctx.AuditFrom(ctx); a != nil {
		s.refused(ctx, a, err)
	}
}

// Row returns ctx carrying the entry of one row of a bulk action: the bulk
// call's entry (caller, address, request) for operation op on resource
// (rtype, id) of tenant, marked with the bulk action's idempotency key. The
// row's script appends it with its change, or Refused records its refusal.
func Row(ctx context.Context, op, rtype, tenant, id, bulkKey string) context.Context {
	a := eventctx.AuditFrom(ctx)
	if a == nil {
		return ctx
	}
	r := *a
	r.Operation, r.ResourceType, r.Tenant, r.ResourceID = op, rtype, tenant, id
	r.Status, r.ErrorCode = 200, ""
	r.Metadata = map[string]string{"bulk_action": a.Operation, "bulk_idempotency_key": bulkKey}
	return eventctx.WithAudit(ctx, &r)
}

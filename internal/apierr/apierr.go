// Package apierr is the error model of cyclesd: a protocol error code (the
// reason clients switch on), a message, and details, mapped onto a gRPC status
// carrying google.rpc.ErrorInfo{domain: "cycles", reason: <code>}.
//
// Every layer returns *Error for anything a client should see; anything else
// that reaches the gRPC boundary is INTERNAL (or UNAVAILABLE for Redis
// connectivity), never a panic.
package apierr

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Domain is the ErrorInfo domain of every cyclesd error.
const Domain = "cycles"

// Code is a protocol error code (docs/protocol.md#errors), used as ErrorInfo.reason.
type Code string

// Protocol error codes. The gRPC and HTTP status of each is fixed by statuses.
const (
	InvalidRequest         Code = "INVALID_REQUEST"
	UnitMismatch           Code = "UNIT_MISMATCH"
	Unauthorized           Code = "UNAUTHORIZED"
	Forbidden              Code = "FORBIDDEN"
	NotFound               Code = "NOT_FOUND"
	BudgetExceeded         Code = "BUDGET_EXCEEDED"
	BudgetFrozen           Code = "BUDGET_FROZEN"
	BudgetClosed           Code = "BUDGET_CLOSED"
	OverdraftLimitExceeded Code = "OVERDRAFT_LIMIT_EXCEEDED"
	DebtOutstanding        Code = "DEBT_OUTSTANDING"
	ReservationFinalized   Code = "RESERVATION_FINALIZED"
	ReservationExpired     Code = "RESERVATION_EXPIRED"
	IdempotencyMismatch    Code = "IDEMPOTENCY_MISMATCH"
	MaxExtensionsExceeded  Code = "MAX_EXTENSIONS_EXCEEDED"
	TenantClosed           Code = "TENANT_CLOSED"
	TenantSuspended        Code = "TENANT_SUSPENDED"
	LimitExceeded          Code = "LIMIT_EXCEEDED"
	// v0.1.26 action governance (internal/actionkind; docs/protocol.md#v0126-action-governance):
	// a live reserve refused by an action quota, or by a policy's allow or deny
	// list of action kinds. Deterministic refusals like BUDGET_EXCEEDED: a
	// quota frees up when its window turns, not by retrying.
	ActionQuotaExceeded  Code = "ACTION_QUOTA_EXCEEDED"
	ActionKindNotAllowed Code = "ACTION_KIND_NOT_ALLOWED"
	ActionKindDenied     Code = "ACTION_KIND_DENIED"
	InternalError        Code = "INTERNAL_ERROR"
	Unavailable          Code = "UNAVAILABLE"
	IdempotencyPending   Code = "IDEMPOTENCY_PENDING"
	// SlowConsumer ends a watch whose client stopped reading (internal/events).
	SlowConsumer Code = "SLOW_CONSUMER"

	// Admin-plane codes.
	TenantNotFound    Code = "TENANT_NOT_FOUND"
	BudgetNotFound    Code = "BUDGET_NOT_FOUND"
	DuplicateResource Code = "DUPLICATE_RESOURCE"
	KeyNotFound       Code = "KEY_NOT_FOUND"
	InvalidState      Code = "INVALID_STATE"
	Overflow          Code = "AMOUNT_OVERFLOW"
	PolicyNotFound    Code = "POLICY_NOT_FOUND"
	EventNotFound     Code = "EVENT_NOT_FOUND"
	// CountMismatch refuses a bulk action whose filter matched another
	// count than the caller's expected_count (nothing is written).
	CountMismatch Code = "COUNT_MISMATCH"

	// StoreFull: Redis reached maxmemory (noeviction) and refused the write;
	// nothing was applied. Settlement (commit, release) and key revocation
	// keep working on Redis 7 (docs/limits.md).
	StoreFull Code = "STORE_FULL"
)

// wireStatus is how one protocol code travels: its gRPC status code and its
// HTTP status on the Cycles HTTP wire (and in audit entries).
type wireStatus struct {
	grpc codes.Code
	http int
}

// statuses is the one code→status table (docs/protocol.md#errors). A code not
// listed is a budget or state conflict: FAILED_PRECONDITION and 409, a
// deterministic refusal that gRPC clients never retry blindly (unlike
// RESOURCE_EXHAUSTED).
var statuses = map[Code]wireStatus{
	InvalidRequest: {codes.InvalidArgument, http.StatusBadRequest},
	UnitMismatch:   {codes.InvalidArgument, http.StatusBadRequest},
	Overflow:       {codes.InvalidArgument, http.StatusBadRequest},
	Unauthorized:   {codes.Unauthenticated, http.StatusUnauthorized},
	Forbidden:      {codes.PermissionDenied, http.StatusForbidden},
	NotFound:       {codes.NotFound, http.StatusNotFound},
	TenantNotFound: {codes.NotFound, http.StatusNotFound},
	BudgetNotFound: {codes.NotFound, http.StatusNotFound},
	KeyNotFound:    {codes.NotFound, http.StatusNotFound},
	PolicyNotFound: {codes.NotFound, http.StatusNotFound},
	EventNotFound:  {codes.NotFound, http.StatusNotFound},
	// An expired reservation is gone on the HTTP wire; on gRPC it is a state
	// conflict like any other.
	ReservationExpired:  {codes.FailedPrecondition, http.StatusGone},
	IdempotencyMismatch: {codes.AlreadyExists, http.StatusConflict},
	DuplicateResource:   {codes.AlreadyExists, http.StatusConflict},
	LimitExceeded:       {codes.ResourceExhausted, http.StatusTooManyRequests},
	// A watch whose client stopped reading: nothing to retry on the HTTP wire.
	SlowConsumer: {codes.ResourceExhausted, http.StatusConflict},
	// Fail closed, retryable later: Redis did not answer, or it is full and
	// refused the write (docs/limits.md).
	StoreFull:          {codes.ResourceExhausted, http.StatusServiceUnavailable},
	Unavailable:        {codes.Unavailable, http.StatusServiceUnavailable},
	IdempotencyPending: {codes.Unavailable, http.StatusInternalServerError},
	InternalError:      {codes.Internal, http.StatusInternalServerError},
}

// conflict is the status of every code statuses does not list.
var conflict = wireStatus{codes.FailedPrecondition, http.StatusConflict}

func (c Code) status() wireStatus {
	if s, ok := statuses[c]; ok {
		return s
	}
	return conflict
}

// GRPCCode is the gRPC status code of a protocol code (statuses).
func (c Code) GRPCCode() codes.Code { return c.status().grpc }

// HTTPStatus is the HTTP status of a refusal with code c on the Cycles HTTP
// wire (and in audit entries), from the same table as GRPCCode.
func (c Code) HTTPStatus() int { return c.status().http }

// Error is a client-visible error.
type Error struct {
	Code    Code
	Message string
	// Details become ErrorInfo metadata (scope, remaining, requested, field, ...).
	Details map[string]string
	// RetryAfter, when positive, is sent as google.rpc.RetryInfo.
	RetryAfter time.Duration
	// Cause is the internal error behind e (a Redis dial or read failure,
	// which names internal addresses). It is in Error() and so in the logs,
	// never in what a client sees: Status and Public leave it out.
	Cause error
}

// Error is e for logs: the client's text plus the internal cause.
func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Public() + ": " + e.Cause.Error()
	}
	return e.Public()
}

// Public is the text a client sees: the code and the fixed message.
func (e *Error) Public() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Unwrap exposes the cause to errors.Is/As.
func (e *Error) Unwrap() error { return e.Cause }

// New returns an Error with a formatted message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// With returns e with one more detail (e is modified and returned).
func (e *Error) With(key, value string) *Error {
	if e.Details == nil {
		e.Details = make(map[string]string, 4)
	}
	e.Details[key] = value
	return e
}

// Invalid is INVALID_REQUEST naming the offending field.
func Invalid(field, format string, args ...any) *Error {
	return New(InvalidRequest, "%s: %s", field, fmt.Sprintf(format, args...)).With("field", field)
}

// As extracts an *Error from err's chain.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// HasCode reports whether err carries the protocol code c.
func HasCode(err error, c Code) bool {
	e, ok := As(err)
	return ok && e.Code == c
}

// Status converts e into a gRPC status with ErrorInfo (and RetryInfo when set).
// requestID and traceID are added to the ErrorInfo metadata when non-empty.
func (e *Error) Status(requestID, traceID string) *status.Status {
	md := make(map[string]string, len(e.Details)+2)
	for k, v := range e.Details {
		md[k] = v
	}
	if requestID != "" {
		md["request_id"] = requestID
	}
	if traceID != "" {
		md["trace_id"] = traceID
	}
	st := status.New(e.Code.GRPCCode(), e.Public())
	info := &errdetails.ErrorInfo{Reason: string(e.Code), Domain: Domain, Metadata: md}
	if retry := e.retryAfter(); retry > 0 {
		if withD, err := st.WithDetails(info, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
			return withD
		}
		return st
	}
	if withD, err := st.WithDetails(info); err == nil {
		return withD
	}
	return st
}

// RetryAfterMsDetail is the detail in which a refusal decided inside a
// script (a policy rate limit: lua/lib/policy_rate.lua) says when the call
// could succeed, in ms; it becomes google.rpc.RetryInfo (and Retry-After on
// the HTTP wire) like RetryAfter.
const RetryAfterMsDetail = "retry_after_ms"

// retryAfter is e.RetryAfter, else the positive retry_after_ms detail of a
// LIMIT_EXCEEDED refusal, else 0.
func (e *Error) retryAfter() time.Duration {
	if e.RetryAfter > 0 || e.Code != LimitExceeded {
		return e.RetryAfter
	}
	ms, err := strconv.ParseInt(e.Details[RetryAfterMsDetail], 10, 64)
	if err != nil || ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// DetailKeys lists e's detail keys in order (for stable logs).
func (e *Error) DetailKeys() []string {
	return slices.Sorted(maps.Keys(e.Details))
}

// FromStatus recovers the protocol code and details of a gRPC error (clients
// and tests). ok is false when the status carries no cycles ErrorInfo.
func FromStatus(err error) (code Code, details map[string]string, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus {
		return "", nil, false
	}
	for _, d := range st.Details() {
		if info, isInfo := d.(*errdetails.ErrorInfo); isInfo && info.GetDomain() == Domain {
			return Code(info.GetReason()), info.GetMetadata(), true
		}
	}
	return "", nil, false
}

// CodeOf is the protocol code of err: its own (an *Error, or a gRPC status
// carrying cycles ErrorInfo), else the nearest code for a bare gRPC status
// (the chain's own refusals) or an ended context; anything else is
// INTERNAL_ERROR. Both the HTTP wire and the audit trail read codes here.
func CodeOf(err error) Code {
	if e, ok := As(err); ok {
		return e.Code
	}
	if code, _, ok := FromStatus(err); ok {
		return code
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return Unavailable
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unauthenticated:
		return Unauthorized
	case codes.PermissionDenied:
		return Forbidden
	case codes.InvalidArgument:
		return InvalidRequest
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable:
		return Unavailable
	}
	return InternalError
}

// runtimeCodes is the runtime spec's closed ErrorCode enum
// (cycles-protocol-v0).
var runtimeCodes = map[Code]bool{
	InvalidRequest: true, Unauthorized: true, Forbidden: true, NotFound: true,
	BudgetExceeded: true, BudgetFrozen: true, BudgetClosed: true, ReservationExpired: true,
	ReservationFinalized: true, IdempotencyMismatch: true, UnitMismatch: true,
	OverdraftLimitExceeded: true, DebtOutstanding: true, MaxExtensionsExceeded: true,
	LimitExceeded: true, TenantClosed: true, InternalError: true,
	// v0.1.26 protocol extensions add three codes to the enum.
	ActionQuotaExceeded: true, ActionKindNotAllowed: true, ActionKindDenied: true,
}

// Runtime is c in the runtime spec's ErrorCode vocabulary, which is closed:
// c itself when the enum has it (ok), else the runtime code a Cycles client
// already handles nearest to it (the HTTP wire then names c in
// details.reason).
func (c Code) Runtime() (Code, bool) {
	if runtimeCodes[c] {
		return c, true
	}
	switch c {
	case Overflow:
		return InvalidRequest, false
	case TenantSuspended:
		return Forbidden, false
	case TenantNotFound, BudgetNotFound, KeyNotFound, PolicyNotFound, EventNotFound:
		return NotFound, false
	default:
		return InternalError, false // UNAVAILABLE, IDEMPOTENCY_PENDING: retry with the same key
	}
}

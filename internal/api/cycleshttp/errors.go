package cycleshttp

import (
	"cmp"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// errorOut is the protocol's ErrorResponse.
type errorOut struct {
	Error     string         `json:"error"`
	Message   string         `json:"message"`
	RequestID string         `json:"request_id"`
	TraceID   string         `json:"trace_id,omitempty"`
	Details   map[string]any `json:"details,omitempty"`
}

// plane selects the error-code vocabulary: the runtime spec's ErrorCode enum
// is closed, so codes only the admin plane knows are folded into the nearest
// runtime code there (the original code stays in details.reason).
type plane int

const (
	runtimePlane plane = iota
	adminPlane
)

// errorOf turns the chain's gRPC status into the HTTP status, headers and
// body of the protocol's ErrorResponse.
func errorOf(err error, p plane, requestID, traceID string) (int, *errorOut, map[string]string) {
	st, _ := status.FromError(err)
	code := apierr.CodeOf(err)
	_, md, _ := apierr.FromStatus(err)
	wire := code
	details := map[string]any{}
	if rc, ok := code.Runtime(); p == runtimePlane && !ok {
		wire = rc
		details["reason"] = string(code)
	}
	// The status is the errors package's (apierr.Code.HTTPStatus); a code
	// folded into the runtime vocabulary keeps its own 503 (UNAVAILABLE and
	// STORE_FULL fold to INTERNAL_ERROR, details.reason naming them).
	httpCode := wire.HTTPStatus()
	if own := code.HTTPStatus(); own == http.StatusServiceUnavailable {
		httpCode = own
	}
	for k, v := range md {
		switch k {
		case "request_id":
			requestID = cmp.Or(v, requestID)
		case "trace_id":
			traceID = cmp.Or(v, traceID)
		case "expected_units":
			details[k] = strings.Split(v, ",")
		case actionkind.MetadataKey:
			// The DenyDetail JSON of a refusal becomes details.deny_detail.
			if d, perr := actionkind.ParseDenyDetail(v); perr == nil && d != nil {
				details[k] = actionkind.WireDenyDetail(d)
			}
		default:
			details[k] = v
			// These ErrorInfo metadata values are integers on the wire.
			if _, perr := strconv.ParseInt(v, 10, 64); perr == nil && (k == "remaining" || k == "requested" || k == "limit") {
				details[k] = json.Number(v)
			}
		}
	}
	msg := strings.TrimPrefix(st.Message(), string(code)+": ")
	headers := map[string]string{}
	for _, d := range st.Details() {
		if ri, isRetry := d.(*errdetails.RetryInfo); isRetry && ri.GetRetryDelay() != nil {
			headers["Retry-After"] = strconv.FormatInt(max(int64(math.Ceil(ri.GetRetryDelay().AsDuration().Seconds())), 1), 10)
		}
	}
	// A policy rate limit (lua/lib/policy_rate.lua) says when its window
	// resets (reset_at_ms, Redis TIME): X-RateLimit-Reset, in Unix seconds
	// (rounded up).
	if ms, perr := strconv.ParseInt(md["reset_at_ms"], 10, 64); perr == nil && code == apierr.LimitExceeded && ms > 0 {
		headers["X-RateLimit-Reset"] = strconv.FormatInt((ms+999)/1000, 10)
	}
	return httpCode, &errorOut{Error: string(wire), Message: msg, RequestID: requestID, TraceID: traceID, Details: details}, headers
}

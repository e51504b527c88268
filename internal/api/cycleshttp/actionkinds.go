package cycleshttp

import (
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// The v0.1.26 action-kind registry: GET /v1/action-kinds and
// GET /v1/action-kinds/{kind}, public (no key), over ActionKindService.

// actionKindsPrefix starts the registry's public routes (preAuth lets them
// through without a key, as the chain does).
const actionKindsPrefix = "/v1/action-kinds"

// registryETag validates cached registry pages: the registry changes only
// with its version (custom kinds are not published).
const registryETag = `"cycles-action-kinds-` + actionkind.Version + `"`

func (a *API) actionKindRoutes() []endpoint {
	if a.svc.ActionKinds == nil {
		return nil
	}
	return []endpoint{
		cached(on(a, "GET /v1/action-kinds", via(a.svc.ActionKinds, cyclesv1.ActionKindServiceServer.ListActionKinds), nil,
			shapeOf("version", "kinds", "next_cursor?", "has_more").nest("kinds", actionKindShape),
			query(q("cursor"), q("risk_class").with(riskParam), q("deprecated"), q("limit").with(kindLimit)))),
		cached(on(a, "GET /v1/action-kinds/{kind}", via(a.svc.ActionKinds, cyclesv1.ActionKindServiceServer.GetActionKind), nil,
			actionKindShape.of("kind"))),
	}
}

// cached answers 304 before the route runs when the client holds the
// current registry.
func cached(e endpoint) endpoint {
	return endpoint{pattern: e.pattern, h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !notModified(w, r) {
			e.h.ServeHTTP(w, r)
		}
	})}
}

// notModified answers 304 when the client holds the current registry.
func notModified(w http.ResponseWriter, r *http.Request) bool {
	w.Header().Set("ETag", registryETag)
	for tag := range strings.SplitSeq(r.Header.Get("If-None-Match"), ",") {
		if t := strings.TrimSpace(tag); t == registryETag || t == "*" {
			w.WriteHeader(http.StatusNotModified)
			return true
		}
	}
	return false
}

func riskParam(name, s string) (protoreflect.Value, error) {
	c, ok := actionkind.ParseRisk(s)
	if !ok {
		return protoreflect.Value{}, apierr.Invalid(name, "must be read_only, local_mutation, side_effect, external_side_effect or high_risk")
	}
	return protoreflect.ValueOfEnum(c.Proto().Number()), nil
}

func kindLimit(name, s string) (protoreflect.Value, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > actionkind.MaxPageSize {
		return protoreflect.Value{}, apierr.Invalid(name, "must be 1..%d", actionkind.MaxPageSize)
	}
	return protoreflect.ValueOfInt32(int32(n)), nil
}

// actionKindShape is the protocol's ActionKind; a policy key spec names
// only the dimensions that matter.
var actionKindShape = shapeOf("kind", "risk_class", "policy_key_spec?", "description?", "mcp_tool_prefixes", "deprecated",
	"replacement_kind?").
	nest("policy_key_spec", shapeOf("host?", "recipient_domain?", "resource_type?", "path_prefix?"))

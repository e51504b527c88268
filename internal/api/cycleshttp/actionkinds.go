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
	if a.kinds == nil {
		return nil
	}
	return []endpoint{
		cached(on(a, "GET /v1/action-kinds", cyclesv1.ActionKindService_ListActionKinds_FullMethodName,
			via(a.kinds, cyclesv1.ActionKindServiceServer.ListActionKinds), nil,
			shaped[*cyclesv1.ListActionKindsResponse](shapeOf("version", "kinds", "next_cursor?", "has_more").with("kinds", item(actionKindOf))),
			query(q("cursor"), q("risk_class").with(riskParam), q("deprecated"), q("limit").with(kindLimit)))),
		cached(on(a, "GET /v1/action-kinds/{kind}", cyclesv1.ActionKindService_GetActionKind_FullMethodName,
			via(a.kinds, cyclesv1.ActionKindServiceServer.GetActionKind), nil,
			func(p *cyclesv1.GetActionKindResponse) *actionKindOut { return actionKindOf(p.GetKind()) })),
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

// actionKindOut is the protocol's ActionKind.
type actionKindOut struct {
	Kind            string            `json:"kind"`
	RiskClass       string            `json:"risk_class"`
	PolicyKeySpec   *policyKeySpecOut `json:"policy_key_spec,omitempty"`
	Description     string            `json:"description,omitempty"`
	MCPToolPrefixes []string          `json:"mcp_tool_prefixes"`
	Deprecated      bool              `json:"deprecated"`
	ReplacementKind string            `json:"replacement_kind,omitempty"`
}

// policyKeySpecOut is the protocol's ActionPolicyKeySpec: only the
// dimensions that matter are present.
type policyKeySpecOut struct {
	Host            bool   `json:"host,omitempty"`
	RecipientDomain bool   `json:"recipient_domain,omitempty"`
	ResourceType    string `json:"resource_type,omitempty"`
	PathPrefix      bool   `json:"path_prefix,omitempty"`
}

func actionKindOf(k *cyclesv1.ActionKind) *actionKindOut {
	out := &actionKindOut{
		Kind: k.GetKind(), RiskClass: string(actionkind.RiskOf(k.GetRiskClass())), Description: k.GetDescription(),
		MCPToolPrefixes: k.GetMcpToolPrefixes(), Deprecated: k.GetDeprecated(), ReplacementKind: k.GetReplacementKind(),
	}
	if out.MCPToolPrefixes == nil {
		out.MCPToolPrefixes = []string{}
	}
	if s := k.GetPolicyKeySpec(); s != nil {
		out.PolicyKeySpec = &policyKeySpecOut{Host: s.GetHost(), RecipientDomain: s.GetRecipientDomain(),
			ResourceType: s.GetResourceType(), PathPrefix: s.GetPathPrefix()}
	}
	return out
}

package cycleshttp

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

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

func (a *API) actionKindRoutes() {
	if a.kinds == nil {
		return
	}
	a.mux.HandleFunc("GET /v1/action-kinds", a.listActionKinds)
	a.mux.HandleFunc("GET /v1/action-kinds/{kind}", a.getActionKind)
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

func (a *API) listActionKinds(w http.ResponseWriter, r *http.Request) {
	if notModified(w, r) {
		return
	}
	req, err := actionKindsRequest(r.URL.Query())
	a.serve(w, r, route{cyclesv1.ActionKindService_ListActionKinds_FullMethodName, runtimePlane, http.StatusOK}, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.kinds.ListActionKinds(ctx, req.(*cyclesv1.ListActionKindsRequest))
		},
		func(resp any) any {
			p := resp.(*cyclesv1.ListActionKindsResponse)
			out := &actionKindsOut{Version: p.GetVersion(), Kinds: make([]*actionKindOut, len(p.GetKinds())),
				NextCursor: p.GetNextCursor(), HasMore: p.GetHasMore()}
			for i, k := range p.GetKinds() {
				out.Kinds[i] = actionKindOf(k)
			}
			return out
		})
}

func (a *API) getActionKind(w http.ResponseWriter, r *http.Request) {
	if notModified(w, r) {
		return
	}
	req := &cyclesv1.GetActionKindRequest{Kind: r.PathValue("kind")}
	a.serve(w, r, route{cyclesv1.ActionKindService_GetActionKind_FullMethodName, runtimePlane, http.StatusOK}, req, nil,
		func(ctx context.Context, req any) (any, error) {
			return a.kinds.GetActionKind(ctx, req.(*cyclesv1.GetActionKindRequest))
		},
		func(resp any) any { return actionKindOf(resp.(*cyclesv1.GetActionKindResponse).GetKind()) })
}

// actionKindsRequest reads the list's query: risk_class, deprecated, cursor, limit.
func actionKindsRequest(q url.Values) (*cyclesv1.ListActionKindsRequest, error) {
	req := &cyclesv1.ListActionKindsRequest{Cursor: q.Get("cursor")}
	if s := q.Get("risk_class"); s != "" {
		c, ok := actionkind.ParseRisk(s)
		if !ok {
			return nil, apierr.Invalid("risk_class", "must be read_only, local_mutation, side_effect, external_side_effect or high_risk")
		}
		req.RiskClass = c.Proto()
	}
	if s := q.Get("deprecated"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, apierr.Invalid("deprecated", "must be true or false")
		}
		req.Deprecated = b
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > actionkind.MaxPageSize {
			return nil, apierr.Invalid("limit", "must be 1..%d", actionkind.MaxPageSize)
		}
		req.Limit = int32(n)
	}
	return req, nil
}

// actionKindsOut is the protocol's ActionKindRegistry.
type actionKindsOut struct {
	Version    string           `json:"version"`
	Kinds      []*actionKindOut `json:"kinds"`
	NextCursor string           `json:"next_cursor,omitempty"`
	HasMore    bool             `json:"has_more"`
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

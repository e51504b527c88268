package cycleshttp

import (
	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Response bodies: exactly the keys of the protocol's response schemas, none
// more (the official SDKs refuse a success body with an unknown key), and
// optional keys omitted where the reference server omits them
// (docs/http-api.md, "Wire rules").

type amountOut struct {
	Unit   string `json:"unit"`
	Amount int64  `json:"amount"`
}

func amountOf(a *cyclesv1.Amount) *amountOut {
	if a == nil {
		return nil
	}
	return &amountOut{Unit: unitName(a.GetUnit()), Amount: a.GetAmount()}
}

// nonZero is a for amounts the reference omits when zero (debt,
// overdraft_limit, released).
func nonZero(a *cyclesv1.Amount) *amountOut {
	if a.GetAmount() == 0 {
		return nil
	}
	return amountOf(a)
}

type balanceOut struct {
	Scope          string     `json:"scope"`
	ScopePath      string     `json:"scope_path"`
	Remaining      amountOut  `json:"remaining"`
	Reserved       amountOut  `json:"reserved"`
	Spent          amountOut  `json:"spent"`
	Allocated      amountOut  `json:"allocated"`
	Debt           *amountOut `json:"debt,omitempty"`
	OverdraftLimit *amountOut `json:"overdraft_limit,omitempty"`
	IsOverLimit    bool       `json:"is_over_limit,omitempty"`
}

func balancesOf(in []*cyclesv1.Balance) []balanceOut {
	if len(in) == 0 {
		return nil
	}
	out := make([]balanceOut, len(in))
	for i, b := range in {
		out[i] = balanceOf(b)
	}
	return out
}

// balanceOf is hand-written: every amount carries the unit of remaining,
// and debt and overdraft_limit are omitted when zero (not when unset), as
// the reference server writes them.
func balanceOf(b *cyclesv1.Balance) balanceOut {
	unit := unitName(b.GetRemaining().GetUnit())
	return balanceOut{
		Scope:          b.GetScope(),
		ScopePath:      b.GetScopePath(),
		Remaining:      amountOut{Unit: unit, Amount: b.GetRemaining().GetAmount()},
		Reserved:       amountOut{Unit: unit, Amount: b.GetReserved().GetAmount()},
		Spent:          amountOut{Unit: unit, Amount: b.GetSpent().GetAmount()},
		Allocated:      amountOut{Unit: unit, Amount: b.GetAllocated().GetAmount()},
		Debt:           nonZero(b.GetDebt()),
		OverdraftLimit: nonZero(b.GetOverdraftLimit()),
		IsOverLimit:    b.GetIsOverLimit(),
	}
}

// capsJSON is the protocol's Caps, both ways (a policy body carries it too).
type capsJSON struct {
	MaxTokens         *int64   `json:"max_tokens,omitempty"`
	MaxStepsRemaining *int64   `json:"max_steps_remaining,omitempty"`
	ToolAllowlist     []string `json:"tool_allowlist,omitempty"`
	ToolDenylist      []string `json:"tool_denylist,omitempty"`
	CooldownMs        *int64   `json:"cooldown_ms,omitempty"`
}

func capsOf(c *cyclesv1.Caps) *capsJSON {
	if c == nil {
		return nil
	}
	return &capsJSON{MaxTokens: c.MaxTokens, MaxStepsRemaining: c.MaxStepsRemaining,
		ToolAllowlist: c.GetToolAllowlist(), ToolDenylist: c.GetToolDenylist(), CooldownMs: c.CooldownMs}
}

// scopes keeps a required array an array ([] rather than null).
func scopes(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

type reserveOut struct {
	Decision       string       `json:"decision"`
	ReservationID  string       `json:"reservation_id,omitempty"`
	Reserved       *amountOut   `json:"reserved,omitempty"`
	ExpiresAtMs    int64        `json:"expires_at_ms,omitempty"`
	RemainingTTLMs *int64       `json:"remaining_ttl_ms,omitempty"`
	ScopePath      string       `json:"scope_path,omitempty"`
	AffectedScopes []string     `json:"affected_scopes"`
	Caps           *capsJSON    `json:"caps,omitempty"`
	Balances       []balanceOut `json:"balances,omitempty"`
	ReasonCode     string       `json:"reason_code,omitempty"`
	RetryAfterMs   *int64       `json:"retry_after_ms,omitempty"`
	// DenyDetail (v0.1.26) only when showDenyDetail says so.
	DenyDetail *actionkind.DenyDetailJSON `json:"deny_detail,omitempty"`
}

// showDenyDetail decides whether a success body carries deny_detail. Strict
// v0.1.25 clients (the official TypeScript SDK) refuse a reserve body with a
// key outside their schema, so it is sent only where v0.1.26 is in play: the
// request used a v0.1.26 field (optIn: observe_mode, action.policy_keys), the
// answer was observed (the tenant observes), or the reason is one only
// v0.1.26 policies produce. gRPC always carries it (docs/protocol.md#v0126-action-governance).
func showDenyDetail(optIn, observed bool, reason string) bool {
	switch apierr.Code(reason) {
	case apierr.ActionQuotaExceeded, apierr.ActionKindNotAllowed, apierr.ActionKindDenied:
		return true
	}
	return optIn || observed
}

func reserveOf(r *cyclesv1.CreateReservationResponse) *reserveOut {
	out := &reserveOut{
		Decision:       decisionNames[int32(r.GetDecision())],
		ReservationID:  r.GetReservationId(),
		Reserved:       amountOf(r.GetReserved()),
		ExpiresAtMs:    r.GetExpiresAtMs(),
		ScopePath:      r.GetScopePath(),
		AffectedScopes: scopes(r.GetAffectedScopes()),
		Caps:           capsOf(r.GetCaps()),
		Balances:       balancesOf(r.GetBalances()),
		ReasonCode:     r.GetReasonCode(),
		RetryAfterMs:   r.RetryAfterMs,
	}
	if r.GetReservationId() != "" { // live reserve only; a dry run has none
		out.RemainingTTLMs = r.RemainingTtlMs
	}
	return out
}

type decideOut struct {
	Decision       string    `json:"decision"`
	Caps           *capsJSON `json:"caps,omitempty"`
	ReasonCode     string    `json:"reason_code,omitempty"`
	RetryAfterMs   *int64    `json:"retry_after_ms,omitempty"`
	AffectedScopes []string  `json:"affected_scopes,omitempty"`
	// DenyDetail (v0.1.26) only when showDenyDetail says so.
	DenyDetail *actionkind.DenyDetailJSON `json:"deny_detail,omitempty"`
}

func decideOf(r *cyclesv1.DecideResponse) *decideOut {
	return &decideOut{Decision: decisionNames[int32(r.GetDecision())], Caps: capsOf(r.GetCaps()),
		ReasonCode: r.GetReasonCode(), RetryAfterMs: r.RetryAfterMs, AffectedScopes: r.GetAffectedScopes()}
}

// withDenyDetail renders a reserve answer with deny_detail when showDenyDetail allows.
func (o *reserveOut) withDenyDetail(r *cyclesv1.CreateReservationResponse, optIn bool) *reserveOut {
	if showDenyDetail(optIn, r.GetObserved(), r.GetReasonCode()) {
		o.DenyDetail = actionkind.WireDenyDetail(r.GetDenyDetail())
	}
	return o
}

// withDenyDetail renders a decision with deny_detail when showDenyDetail allows.
func (o *decideOut) withDenyDetail(r *cyclesv1.DecideResponse, optIn bool) *decideOut {
	if showDenyDetail(optIn, false, r.GetReasonCode()) {
		o.DenyDetail = actionkind.WireDenyDetail(r.GetDenyDetail())
	}
	return o
}

type commitOut struct {
	Status   string       `json:"status"`
	Charged  *amountOut   `json:"charged"`
	Released *amountOut   `json:"released,omitempty"`
	Balances []balanceOut `json:"balances,omitempty"`
}

func commitOf(r *cyclesv1.CommitReservationResponse) *commitOut {
	return &commitOut{Status: "COMMITTED", Charged: amountOf(r.GetCharged()), Released: nonZero(r.GetReleased()),
		Balances: balancesOf(r.GetBalances())}
}

type releaseOut struct {
	Status   string       `json:"status"`
	Released *amountOut   `json:"released"`
	Balances []balanceOut `json:"balances,omitempty"`
}

func releaseOf(r *cyclesv1.ReleaseReservationResponse) *releaseOut {
	return &releaseOut{Status: "RELEASED", Released: amountOf(r.GetReleased()), Balances: balancesOf(r.GetBalances())}
}

type extendOut struct {
	Status         string       `json:"status"`
	ExpiresAtMs    int64        `json:"expires_at_ms"`
	RemainingTTLMs int64        `json:"remaining_ttl_ms"`
	Balances       []balanceOut `json:"balances,omitempty"`
}

func extendOf(r *cyclesv1.ExtendReservationResponse) *extendOut {
	return &extendOut{Status: "ACTIVE", ExpiresAtMs: r.GetExpiresAtMs(), RemainingTTLMs: r.GetRemainingTtlMs(),
		Balances: balancesOf(r.GetBalances())}
}

type eventOut struct {
	Status   string       `json:"status"`
	EventID  string       `json:"event_id"`
	Charged  *amountOut   `json:"charged,omitempty"`
	Balances []balanceOut `json:"balances,omitempty"`
}

func eventOf(r *cyclesv1.CreateEventResponse) *eventOut {
	return &eventOut{Status: "APPLIED", EventID: r.GetEventId(), Charged: amountOf(r.GetCharged()),
		Balances: balancesOf(r.GetBalances())}
}

type subjectOut struct {
	Tenant     string            `json:"tenant,omitempty"`
	Workspace  string            `json:"workspace,omitempty"`
	App        string            `json:"app,omitempty"`
	Workflow   string            `json:"workflow,omitempty"`
	Agent      string            `json:"agent,omitempty"`
	Toolset    string            `json:"toolset,omitempty"`
	Dimensions map[string]string `json:"dimensions,omitempty"`
}

type actionOut struct {
	Kind string   `json:"kind"`
	Name string   `json:"name"`
	Tags []string `json:"tags,omitempty"`
}

type reservationOut struct {
	ReservationID     string         `json:"reservation_id"`
	Status            string         `json:"status"`
	IdempotencyKey    string         `json:"idempotency_key,omitempty"`
	Subject           subjectOut     `json:"subject"`
	Action            actionOut      `json:"action"`
	Reserved          *amountOut     `json:"reserved"`
	Committed         *amountOut     `json:"committed,omitempty"`
	CreatedAtMs       int64          `json:"created_at_ms"`
	ExpiresAtMs       int64          `json:"expires_at_ms"`
	FinalizedAtMs     *int64         `json:"finalized_at_ms,omitempty"`
	ScopePath         string         `json:"scope_path"`
	AffectedScopes    []string       `json:"affected_scopes"`
	Metadata          map[string]any `json:"metadata,omitempty"`
	CommittedMetadata map[string]any `json:"committed_metadata,omitempty"`
}

func reservationOf(r *cyclesv1.Reservation) reservationOut {
	s := r.GetSubject()
	out := reservationOut{
		ReservationID:  r.GetReservationId(),
		Status:         statusNames[int32(r.GetStatus())],
		IdempotencyKey: r.GetIdempotencyKey(),
		Subject: subjectOut{Tenant: s.GetTenant(), Workspace: s.GetWorkspace(), App: s.GetApp(), Workflow: s.GetWorkflow(),
			Agent: s.GetAgent(), Toolset: s.GetToolset(), Dimensions: s.GetDimensions()},
		Action:            actionOut{Kind: r.GetAction().GetKind(), Name: r.GetAction().GetName(), Tags: r.GetAction().GetTags()},
		Reserved:          amountOf(r.GetReserved()),
		CreatedAtMs:       r.GetCreatedAtMs(),
		ExpiresAtMs:       r.GetExpiresAtMs(),
		ScopePath:         r.GetScopePath(),
		AffectedScopes:    scopes(r.GetAffectedScopes()),
		Metadata:          mapOf(r.GetMetadata()),
		CommittedMetadata: mapOf(r.GetCommittedMetadata()),
	}
	switch r.GetStatus() {
	case cyclesv1.ReservationStatus_RESERVATION_STATUS_COMMITTED:
		out.Committed = amountOf(r.GetCommitted())
		out.FinalizedAtMs = r.FinalizedAtMs
	case cyclesv1.ReservationStatus_RESERVATION_STATUS_RELEASED:
		out.FinalizedAtMs = r.FinalizedAtMs
	}
	return out
}

func mapOf(s *structpb.Struct) map[string]any {
	if s == nil || len(s.GetFields()) == 0 {
		return nil
	}
	return s.AsMap()
}

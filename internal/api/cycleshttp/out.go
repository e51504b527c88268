package cycleshttp

import (
	"encoding/json"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Runtime answers: exactly the keys of the protocol's response schemas, none
// more (the official SDKs refuse a success body with an unknown key), and
// optional keys omitted where the reference server omits them
// (docs/http-api.md, "Wire rules"). Each is a declared shape (shape.go).

var (
	amountShape = shapeOf("unit", "amount")
	capsShape   = shapeOf("max_tokens?", "max_steps_remaining?", "tool_allowlist?", "tool_denylist?", "cooldown_ms?")
	// A balance's amounts all carry the unit of remaining; debt and
	// overdraft_limit are omitted when zero, as the reference writes them.
	balanceShape = shapeOf("scope", "scope_path", "remaining=remaining.amount:remaining.unit",
		"reserved=reserved.amount:remaining.unit", "spent=spent.amount:remaining.unit",
		"allocated=allocated.amount:remaining.unit", "debt=debt.amount:remaining.unit?",
		"overdraft_limit=overdraft_limit.amount:remaining.unit?", "is_over_limit?")
	reservationShape = shapeOf("reservation_id", "status", "idempotency_key?", "subject", "action", "reserved", "committed",
		"created_at_ms", "expires_at_ms", "finalized_at_ms", "scope_path", "affected_scopes", "metadata?", "committed_metadata?").
		nest("subject", shapeOf("tenant?", "workspace?", "app?", "workflow?", "agent?", "toolset?", "dimensions?")).
		nest("action", shapeOf("kind", "name", "tags?")).nest("reserved", amountShape).
		// committed and finalized_at_ms belong to a finalized reservation only.
		calc("committed", func(m protoreflect.Message) (any, bool) {
			r := m.Interface().(*cyclesv1.Reservation)
			return amountShape.json(r.GetCommitted().ProtoReflect()),
				r.GetStatus() == cyclesv1.ReservationStatus_RESERVATION_STATUS_COMMITTED && r.Committed != nil
		}).
		calc("finalized_at_ms", func(m protoreflect.Message) (any, bool) {
			r := m.Interface().(*cyclesv1.Reservation)
			s := r.GetStatus()
			return r.GetFinalizedAtMs(), r.FinalizedAtMs != nil && (s == cyclesv1.ReservationStatus_RESERVATION_STATUS_COMMITTED ||
				s == cyclesv1.ReservationStatus_RESERVATION_STATUS_RELEASED)
		})
)

// withBalances adds the runtime answers' balances list.
func withBalances(s *shape) *shape { return s.nest("balances", balanceShape) }

// reserveAnswer and decideAnswer write deny_detail only when showDenyDetail
// says so: the same answer in two shapes.
func reserveAnswer(detail bool) *shape {
	specs := []string{"decision", "reservation_id?", "reserved?", "expires_at_ms?", "remaining_ttl_ms", "scope_path?",
		"affected_scopes", "caps?", "balances?", "reason_code?", "retry_after_ms?"}
	s := withBalances(shapeOf(append(specs, denyDetailMember(detail)...)...)).nest("reserved", amountShape).nest("caps", capsShape).
		// remaining_ttl_ms belongs to a live reservation; a dry run has none.
		calc("remaining_ttl_ms", func(m protoreflect.Message) (any, bool) {
			r := m.Interface().(*cyclesv1.CreateReservationResponse)
			return r.GetRemainingTtlMs(), r.RemainingTtlMs != nil && r.GetReservationId() != ""
		})
	return withDenyDetailShape(s, detail)
}

func decideAnswer(detail bool) *shape {
	s := shapeOf(append([]string{"decision", "caps?", "reason_code?", "retry_after_ms?", "affected_scopes?"},
		denyDetailMember(detail)...)...).nest("caps", capsShape)
	return withDenyDetailShape(s, detail)
}

func denyDetailMember(detail bool) []string {
	if detail {
		return []string{"deny_detail?"}
	}
	return nil
}

func withDenyDetailShape(s *shape, detail bool) *shape {
	if detail {
		s.with("deny_detail", item(actionkind.WireDenyDetail))
	}
	return s
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

// detailed picks the shape of an answer by showDenyDetail.
func detailed[Req, Resp proto.Message](plain, detail *shape, show func(Req, Resp) bool) func(req, resp protoreflect.Message) json.RawMessage {
	var zero Resp
	plain.check(zero.ProtoReflect().Descriptor())
	detail.check(zero.ProtoReflect().Descriptor())
	return func(req, resp protoreflect.Message) json.RawMessage {
		if show(req.Interface().(Req), resp.Interface().(Resp)) {
			return detail.json(resp)
		}
		return plain.json(resp)
	}
}

var (
	commitAnswer = withBalances(shapeOf("status", "charged", "released", "balances?")).fixed("status", `"COMMITTED"`).
			nest("charged", amountShape).
			calc("released", func(m protoreflect.Message) (any, bool) { // omitted when zero, as the reference does
			r := m.Interface().(*cyclesv1.CommitReservationResponse).GetReleased()
			return amountShape.json(r.ProtoReflect()), r.GetAmount() != 0
		})
	releaseAnswer = withBalances(shapeOf("status", "released", "balances?")).fixed("status", `"RELEASED"`).nest("released", amountShape)
	extendAnswer  = withBalances(shapeOf("status", "expires_at_ms", "remaining_ttl_ms", "balances?")).fixed("status", `"ACTIVE"`)
	eventAnswer   = withBalances(shapeOf("status", "event_id", "charged?", "balances?")).fixed("status", `"APPLIED"`).
			nest("charged", amountShape)
)

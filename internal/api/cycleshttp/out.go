package cycleshttp

import (
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/protowire"
)

// Runtime answers: exactly the keys of the protocol's response schemas, none
// more (the official SDKs refuse a success body with an unknown key), and
// optional keys omitted where the reference server omits them
// (docs/http-api.md, "Wire rules"). Each is a declared shape
// (protowire.Shape) of its message type (answerShapes), or its type's
// default: its fields in proto order (an Amount is {unit, amount}).

var (
	amountShape = protowire.ShapeOf("unit", "amount")
	// A balance's amounts all carry the unit of remaining; debt and
	// overdraft_limit are omitted when zero, as the reference writes them.
	balanceShape = protowire.ShapeOf("scope", "scope_path", "remaining=remaining.amount:remaining.unit",
		"reserved=reserved.amount:remaining.unit", "spent=spent.amount:remaining.unit",
		"allocated=allocated.amount:remaining.unit", "debt=debt.amount:remaining.unit?",
		"overdraft_limit=overdraft_limit.amount:remaining.unit?", "is_over_limit?")
	reservationShape = protowire.ShapeOf("reservation_id", "status", "idempotency_key?", "subject", "action", "reserved", "committed",
		"created_at_ms", "expires_at_ms", "finalized_at_ms", "scope_path", "affected_scopes", "metadata?", "committed_metadata?").
		Nest("action", protowire.ShapeOf("kind", "name", "tags?")).
		// committed and finalized_at_ms belong to a finalized reservation only.
		Calc("committed", func(m protoreflect.Message) (any, bool) {
			r := m.Interface().(*cyclesv1.Reservation)
			return amountShape.JSON(r.GetCommitted().ProtoReflect()),
				r.GetStatus() == cyclesv1.ReservationStatus_RESERVATION_STATUS_COMMITTED && r.Committed != nil
		}).
		Calc("finalized_at_ms", func(m protoreflect.Message) (any, bool) {
			r := m.Interface().(*cyclesv1.Reservation)
			s := r.GetStatus()
			return r.GetFinalizedAtMs(), r.FinalizedAtMs != nil && (s == cyclesv1.ReservationStatus_RESERVATION_STATUS_COMMITTED ||
				s == cyclesv1.ReservationStatus_RESERVATION_STATUS_RELEASED)
		})
	// reserveAnswer and decideAnswer carry deny_detail, left out where
	// terse says so (wire.terse).
	reserveAnswer = protowire.ShapeOf("decision", "reservation_id?", "reserved?", "expires_at_ms?", "remaining_ttl_ms", "scope_path?",
		"affected_scopes", "caps?", "balances?", "reason_code?", "retry_after_ms?", "deny_detail?").
		With("deny_detail", protowire.Item(actionkind.WireDenyDetail)).
		// remaining_ttl_ms belongs to a live reservation; a dry run has none.
		Calc("remaining_ttl_ms", func(m protoreflect.Message) (any, bool) {
			r := m.Interface().(*cyclesv1.CreateReservationResponse)
			return r.GetRemainingTtlMs(), r.RemainingTtlMs != nil && r.GetReservationId() != ""
		})
	decideAnswer = protowire.ShapeOf("decision", "caps?", "reason_code?", "retry_after_ms?", "affected_scopes?", "deny_detail?").
			With("deny_detail", protowire.Item(actionkind.WireDenyDetail))
	// A settled answer's status is the one its call always leaves.
	commitAnswer = protowire.ShapeOf("status", "charged", "released", "balances?").Fixed("status", `"COMMITTED"`).
			Calc("released", func(m protoreflect.Message) (any, bool) { // omitted when zero, as the reference does
			r := m.Interface().(*cyclesv1.CommitReservationResponse).GetReleased()
			return amountShape.JSON(r.ProtoReflect()), r.GetAmount() != 0
		})
	releaseAnswer = protowire.ShapeOf("status", "released", "balances?").Fixed("status", `"RELEASED"`)
	extendAnswer  = protowire.ShapeOf("status", "expires_at_ms", "remaining_ttl_ms", "balances?").Fixed("status", `"ACTIVE"`)
	eventAnswer   = protowire.ShapeOf("status", "event_id", "charged?", "balances?").Fixed("status", `"APPLIED"`)
)

// terse says when a success body leaves deny_detail out (wire.terse). Strict
// v0.1.25 clients (the official TypeScript SDK) refuse a reserve body with a
// key outside their schema, so it is sent only where v0.1.26 is in play
// (show's answers): the request used a v0.1.26 field (optIn: observe_mode,
// action.policy_keys), the answer was observed (the tenant observes), or the
// reason is one only v0.1.26 policies produce. gRPC always carries it
// (docs/protocol.md#v0126-action-governance).
func terse[Req, Resp proto.Message](show func(Req, Resp) (optIn, observed bool, reason string)) func(req, resp protoreflect.Message) bool {
	return func(req, resp protoreflect.Message) bool {
		optIn, observed, reason := show(req.Interface().(Req), resp.Interface().(Resp))
		v0126 := []apierr.Code{apierr.ActionQuotaExceeded, apierr.ActionKindNotAllowed, apierr.ActionKindDenied}
		return !optIn && !observed && !slices.Contains(v0126, apierr.Code(reason))
	}
}

package cycleshttp

import (
	"net/http"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Runtime routes (cycles-protocol-v0 paths), each bound to its RuntimeService
// method. The admin key may get, list and release reservations on a tenant's
// behalf: the methods' access option (admin_on_behalf_of) says so, and the
// chain runs them as that tenant (internal/server onBehalfUnary).
func (a *API) runtimeRoutes() []endpoint {
	rt := a.svc.Runtime
	return []endpoint{
		onReq(a, "POST /v1/reservations", via(rt, cyclesv1.RuntimeServiceServer.CreateReservation), protoJSON,
			detailed(reserveAnswer(false), reserveAnswer(true),
				func(req *cyclesv1.CreateReservationRequest, p *cyclesv1.CreateReservationResponse) bool {
					return showDenyDetail(req.GetObserveMode() != 0 || req.GetAction().GetPolicyKeys() != nil, p.GetObserved(), p.GetReasonCode())
				})),
		onReq(a, "POST /v1/decide", via(rt, cyclesv1.RuntimeServiceServer.Decide), protoJSON,
			detailed(decideAnswer(false), decideAnswer(true), func(req *cyclesv1.DecideRequest, p *cyclesv1.DecideResponse) bool {
				return showDenyDetail(req.GetAction().GetPolicyKeys() != nil, false, p.GetReasonCode())
			})),
		on(a, "POST /v1/events", via(rt, cyclesv1.RuntimeServiceServer.CreateEvent), protoJSON, eventAnswer, created),
		on(a, "POST /v1/reservations/{reservation_id}/commit", via(rt, cyclesv1.RuntimeServiceServer.CommitReservation), protoJSON, commitAnswer),
		on(a, "POST /v1/reservations/{reservation_id}/release", via(rt, cyclesv1.RuntimeServiceServer.ReleaseReservation), protoJSON,
			releaseAnswer),
		on(a, "POST /v1/reservations/{reservation_id}/extend", via(rt, cyclesv1.RuntimeServiceServer.ExtendReservation), protoJSON, extendAnswer),
		on(a, "GET /v1/reservations/{reservation_id}", via(rt, cyclesv1.RuntimeServiceServer.GetReservation), nil,
			reservationShape.of("reservation")),
		on(a, "GET /v1/reservations", via(rt, cyclesv1.RuntimeServiceServer.ListReservations), check(listChecks),
			page("reservations", nil).nest("reservations", reservationShape),
			query(q("idempotency_key"), q("tenant"), q("workspace"), q("app"), q("workflow"), q("agent"), q("toolset"),
				q("cursor"), q("status"), q("include"), q("limit"),
				qf("from", "created_from_ms"), qf("to", "created_to_ms"), qf("expires_from", "expires_from_ms"),
				qf("expires_to", "expires_to_ms"), qf("finalized_from", "finalized_from_ms"), qf("finalized_to", "finalized_to_ms"),
				q("sort_by").with(sortByParam), q("sort_dir").with(sortDirParam))),
		on(a, "GET /v1/balances", via(rt, cyclesv1.RuntimeServiceServer.GetBalances), nil,
			page("balances", nil).nest("balances", balanceShape),
			query(q("tenant"), q("workspace"), q("app"), q("workflow"), q("agent"), q("toolset"), q("cursor"),
				q("include_children"), q("unit"), q("limit"))),
	}
}

// check adapts a request check to the route's read step (a route without a
// body checks what its parameters cannot check one by one).
func check[Req proto.Message](f func(Req) error) func(*API, http.ResponseWriter, *http.Request, Req) error {
	return func(_ *API, _ http.ResponseWriter, _ *http.Request, req Req) error { return f(req) }
}

// window refuses a time window whose start is after its end.
func window(fromName, toName string, from, to *int64) error {
	if from != nil && to != nil && *from > *to {
		return apierr.Invalid(fromName, "is after %s", toName)
	}
	return nil
}

// listChecks: each time window in order; a sort key without a direction
// sorts descending.
func listChecks(req *cyclesv1.ListReservationsRequest) error {
	for _, err := range []error{window("from", "to", req.CreatedFromMs, req.CreatedToMs),
		window("expires_from", "expires_to", req.ExpiresFromMs, req.ExpiresToMs),
		window("finalized_from", "finalized_to", req.FinalizedFromMs, req.FinalizedToMs)} {
		if err != nil {
			return err
		}
	}
	if req.SortBy != cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_UNSPECIFIED && req.SortDir == cyclesv1.SortDirection_SORT_DIRECTION_UNSPECIFIED {
		req.SortDir = cyclesv1.SortDirection_SORT_DIRECTION_DESC
	}
	return nil
}

// sortKeys are the spec's sort_by names (its keys are not the enum's names).
var sortKeys = map[string]cyclesv1.ReservationSortField{
	"created_at_ms":  cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_CREATED_AT,
	"expires_at_ms":  cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_EXPIRES_AT,
	"reservation_id": cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_RESERVATION_ID,
	"tenant":         cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_TENANT,
	"scope_path":     cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_SCOPE_PATH,
	"status":         cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_STATUS,
	"reserved":       cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_RESERVED,
}

func sortByParam(name, s string) (protoreflect.Value, error) {
	v, ok := sortKeys[s]
	if !ok {
		return protoreflect.Value{}, apierr.Invalid(name, "%q is not a sort key: reservation_id, tenant, scope_path, status, reserved, created_at_ms or expires_at_ms", s)
	}
	return protoreflect.ValueOfEnum(v.Number()), nil
}

// sortDirParam reads asc or desc (lower case, as the spec spells them).
func sortDirParam(name, s string) (protoreflect.Value, error) {
	switch s {
	case "asc":
		return protoreflect.ValueOfEnum(cyclesv1.SortDirection_SORT_DIRECTION_ASC.Number()), nil
	case "desc":
		return protoreflect.ValueOfEnum(cyclesv1.SortDirection_SORT_DIRECTION_DESC.Number()), nil
	}
	return protoreflect.Value{}, apierr.Invalid(name, "must be asc or desc, got %q", s)
}

package cycleshttp

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/ledger"
)

// Runtime routes (cycles-protocol-v0 paths), each bound to its RuntimeService
// method.

func (a *API) createReservation(w http.ResponseWriter, r *http.Request) {
	var in reserveIn
	req, err := decodeInto(a, w, r, &in, in.proto)
	a.serve(w, r, route{cyclesv1.RuntimeService_CreateReservation_FullMethodName, runtimePlane, http.StatusOK}, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.rt.CreateReservation(ctx, req.(*cyclesv1.CreateReservationRequest))
		},
		func(resp any) any {
			p := resp.(*cyclesv1.CreateReservationResponse)
			return reserveOf(p).withDenyDetail(p, in.ObserveMode != nil || in.Action.hasPolicyKeys())
		})
}

func (a *API) decide(w http.ResponseWriter, r *http.Request) {
	var in decideIn
	req, err := decodeInto(a, w, r, &in, in.proto)
	a.serve(w, r, route{cyclesv1.RuntimeService_Decide_FullMethodName, runtimePlane, http.StatusOK}, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.rt.Decide(ctx, req.(*cyclesv1.DecideRequest))
		},
		func(resp any) any {
			p := resp.(*cyclesv1.DecideResponse)
			return decideOf(p).withDenyDetail(p, in.Action.hasPolicyKeys())
		})
}

func (a *API) createEvent(w http.ResponseWriter, r *http.Request) {
	var in eventIn
	req, err := decodeInto(a, w, r, &in, in.proto)
	a.serve(w, r, route{cyclesv1.RuntimeService_CreateEvent_FullMethodName, runtimePlane, http.StatusCreated}, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.rt.CreateEvent(ctx, req.(*cyclesv1.CreateEventRequest))
		},
		func(resp any) any { return eventOf(resp.(*cyclesv1.CreateEventResponse)) })
}

func (a *API) commitReservation(w http.ResponseWriter, r *http.Request) {
	var in commitIn
	id := r.PathValue("reservation_id")
	req, err := decodeInto(a, w, r, &in, func() (*cyclesv1.CommitReservationRequest, error) { return in.proto(id) })
	a.serve(w, r, route{cyclesv1.RuntimeService_CommitReservation_FullMethodName, runtimePlane, http.StatusOK}, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.rt.CommitReservation(ctx, req.(*cyclesv1.CommitReservationRequest))
		},
		func(resp any) any { return commitOf(resp.(*cyclesv1.CommitReservationResponse)) })
}

func (a *API) releaseReservation(w http.ResponseWriter, r *http.Request) {
	var in releaseIn
	id := r.PathValue("reservation_id")
	req, err := decodeInto(a, w, r, &in, func() (*cyclesv1.ReleaseReservationRequest, error) { return in.proto(id) })
	a.serve(w, r, route{dualAuth(r, cyclesv1.RuntimeService_ReleaseReservation_FullMethodName), runtimePlane, http.StatusOK}, req, err,
		func(ctx context.Context, req any) (any, error) {
			owner, err := ownerOf(req.(*cyclesv1.ReleaseReservationRequest).GetReservationId())
			if ctx, err = onBehalf(ctx, owner, err); err != nil {
				return nil, err
			}
			return a.rt.ReleaseReservation(ctx, req.(*cyclesv1.ReleaseReservationRequest))
		},
		func(resp any) any { return releaseOf(resp.(*cyclesv1.ReleaseReservationResponse)) })
}

func (a *API) extendReservation(w http.ResponseWriter, r *http.Request) {
	var in extendIn
	id := r.PathValue("reservation_id")
	req, err := decodeInto(a, w, r, &in, func() (*cyclesv1.ExtendReservationRequest, error) { return in.proto(id) })
	a.serve(w, r, route{cyclesv1.RuntimeService_ExtendReservation_FullMethodName, runtimePlane, http.StatusOK}, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.rt.ExtendReservation(ctx, req.(*cyclesv1.ExtendReservationRequest))
		},
		func(resp any) any { return extendOf(resp.(*cyclesv1.ExtendReservationResponse)) })
}

// dualAuth is the chain method of a route the runtime spec lets the admin
// key call: the runtime method for a tenant key; for an admin-key-only
// caller a method under AdminOnBehalfService, which the chain (like every
// method it does not know as tenant-callable) admits with the admin key
// only. gRPC's own auth rules stay unchanged.
func dualAuth(r *http.Request, method string) string {
	if r.Header.Get("X-Cycles-API-Key") == "" && (r.Header.Get("X-Admin-API-Key") != "" || r.Header.Get("X-Cycles-Admin-Key") != "") {
		return "/cycles.v1.AdminOnBehalfService/" + method[strings.LastIndexByte(method, '/')+1:]
	}
	return method
}

// onBehalf lets the admin key act for tenant on the protocol's dual-auth
// routes (get, list, release of reservations): the handler then runs as that
// tenant, and events record the admin as the actor.
func onBehalf(ctx context.Context, tenant string, missing error) (context.Context, error) {
	p, ok := auth.FromContext(ctx)
	if !ok || !p.Admin {
		return ctx, nil
	}
	if tenant == "" {
		return ctx, missing
	}
	return auth.WithPrincipal(ctx, auth.Principal{Tenant: tenant, Admin: true}), nil
}

// ownerOf is the tenant a reservation id names (ids name their owner).
func ownerOf(id string) (string, error) {
	owner, ok := ledger.OwnerOf(id)
	if !ok {
		return "", apierr.New(apierr.NotFound, "reservation %s not found", id)
	}
	return owner, nil
}

func (a *API) getReservation(w http.ResponseWriter, r *http.Request) {
	req := &cyclesv1.GetReservationRequest{ReservationId: r.PathValue("reservation_id")}
	a.serve(w, r, route{dualAuth(r, cyclesv1.RuntimeService_GetReservation_FullMethodName), runtimePlane, http.StatusOK}, req, nil,
		func(ctx context.Context, req any) (any, error) {
			owner, err := ownerOf(req.(*cyclesv1.GetReservationRequest).GetReservationId())
			if ctx, err = onBehalf(ctx, owner, err); err != nil {
				return nil, err
			}
			return a.rt.GetReservation(ctx, req.(*cyclesv1.GetReservationRequest))
		},
		func(resp any) any {
			out := reservationOf(resp.(*cyclesv1.GetReservationResponse).GetReservation())
			return &out
		})
}

func (a *API) listReservations(w http.ResponseWriter, r *http.Request) {
	req, err := listRequest(r.URL.Query())
	a.serve(w, r, route{dualAuth(r, cyclesv1.RuntimeService_ListReservations_FullMethodName), runtimePlane, http.StatusOK}, req, err,
		func(ctx context.Context, req any) (any, error) {
			lr := req.(*cyclesv1.ListReservationsRequest)
			ctx, err := onBehalf(ctx, lr.GetTenant(),
				apierr.Invalid("tenant", "tenant query parameter is required when using admin key authentication"))
			if err != nil {
				return nil, err
			}
			return a.rt.ListReservations(ctx, lr)
		},
		func(resp any) any { return listOf(resp.(*cyclesv1.ListReservationsResponse)) })
}

func (a *API) getBalances(w http.ResponseWriter, r *http.Request) {
	req, err := balancesRequest(r.URL.Query())
	a.serve(w, r, route{cyclesv1.RuntimeService_GetBalances_FullMethodName, runtimePlane, http.StatusOK}, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.rt.GetBalances(ctx, req.(*cyclesv1.GetBalancesRequest))
		},
		func(resp any) any { return balancesRespOf(resp.(*cyclesv1.GetBalancesResponse)) })
}

// decodeInto decodes the body into in, then translates it with toProto.
func decodeInto[T any, P any](a *API, w http.ResponseWriter, r *http.Request, in *T, toProto func() (P, error)) (any, error) {
	if err := a.decodeJSON(w, r, in); err != nil {
		return nil, err
	}
	p, err := toProto()
	if err != nil {
		return nil, err
	}
	return p, nil
}

// ---- query parameters -------------------------------------------------------

// listRequest reads listReservations' query. Blank window bounds are unset
// (the spec requires it); unknown parameters are ignored (additive-parameter
// rule); a known parameter with a bad value is INVALID_REQUEST naming it.
func listRequest(q url.Values) (*cyclesv1.ListReservationsRequest, error) {
	req := &cyclesv1.ListReservationsRequest{
		IdempotencyKey: q.Get("idempotency_key"),
		Tenant:         q.Get("tenant"),
		Workspace:      q.Get("workspace"),
		App:            q.Get("app"),
		Workflow:       q.Get("workflow"),
		Agent:          q.Get("agent"),
		Toolset:        q.Get("toolset"),
		Cursor:         q.Get("cursor"),
	}
	if s := q.Get("status"); s != "" {
		v, err := parseEnum("status", s, statusValues)
		if err != nil {
			return nil, err
		}
		req.Status = cyclesv1.ReservationStatus(v)
	}
	windows := []struct {
		from, to string
		lo, hi   **int64
	}{
		{"from", "to", &req.CreatedFromMs, &req.CreatedToMs},
		{"expires_from", "expires_to", &req.ExpiresFromMs, &req.ExpiresToMs},
		{"finalized_from", "finalized_to", &req.FinalizedFromMs, &req.FinalizedToMs},
	}
	for _, win := range windows {
		lo, err := timeParam(q, win.from)
		if err != nil {
			return nil, err
		}
		hi, err := timeParam(q, win.to)
		if err != nil {
			return nil, err
		}
		if lo != nil && hi != nil && *lo > *hi {
			return nil, apierr.Invalid(win.from, "is after %s", win.to)
		}
		*win.lo, *win.hi = lo, hi
	}
	switch s := q.Get("sort_by"); s {
	case "":
	case "created_at_ms":
		req.SortBy = cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_CREATED_AT
	case "expires_at_ms":
		req.SortBy = cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_EXPIRES_AT
	case "reservation_id":
		req.SortBy = cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_RESERVATION_ID
	case "tenant":
		req.SortBy = cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_TENANT
	case "scope_path":
		req.SortBy = cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_SCOPE_PATH
	case "status":
		req.SortBy = cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_STATUS
	case "reserved":
		req.SortBy = cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_RESERVED
	default:
		return nil, apierr.Invalid("sort_by", "%q is not a sort key: reservation_id, tenant, scope_path, status, reserved, created_at_ms or expires_at_ms", s)
	}
	switch s := q.Get("sort_dir"); s {
	case "":
		if req.SortBy != cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_UNSPECIFIED {
			req.SortDir = cyclesv1.SortDirection_SORT_DIRECTION_DESC
		}
	case "asc":
		req.SortDir = cyclesv1.SortDirection_SORT_DIRECTION_ASC
	case "desc":
		req.SortDir = cyclesv1.SortDirection_SORT_DIRECTION_DESC
	default:
		return nil, apierr.Invalid("sort_dir", "must be asc or desc, got %q", s)
	}
	for _, v := range q["include"] {
		for _, tok := range strings.Split(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" {
				req.Include = append(req.Include, tok)
			}
		}
	}
	limit, err := limitParam(q)
	if err != nil {
		return nil, err
	}
	req.Limit = limit
	return req, nil
}

func balancesRequest(q url.Values) (*cyclesv1.GetBalancesRequest, error) {
	req := &cyclesv1.GetBalancesRequest{
		Tenant:    q.Get("tenant"),
		Workspace: q.Get("workspace"),
		App:       q.Get("app"),
		Workflow:  q.Get("workflow"),
		Agent:     q.Get("agent"),
		Toolset:   q.Get("toolset"),
		Cursor:    q.Get("cursor"),
	}
	if s := q.Get("include_children"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, apierr.Invalid("include_children", "must be true or false, got %q", s)
		}
		req.IncludeChildren = b
	}
	if s := q.Get("unit"); s != "" { // cyclesd extension: one unit only
		v, err := parseEnum("unit", s, unitValues)
		if err != nil {
			return nil, err
		}
		req.Unit = cyclesv1.Unit(v)
	}
	limit, err := limitParam(q)
	if err != nil {
		return nil, err
	}
	req.Limit = limit
	return req, nil
}

func limitParam(q url.Values) (int32, error) {
	s := q.Get("limit")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 1 {
		return 0, apierr.Invalid("limit", "must be an integer from 1 to 200, got %q", s)
	}
	return int32(n), nil
}

// timeParam reads an ISO 8601 date-time as epoch milliseconds; blank is unset.
func timeParam(q url.Values, name string) (*int64, error) {
	s := strings.TrimSpace(q.Get(name))
	if s == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil, apierr.Invalid(name, "must be an ISO 8601 date-time (e.g. 2026-01-02T15:04:05Z), got %q", s)
	}
	ms := t.UnixMilli()
	return &ms, nil
}

package cycleshttp

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/protowire"
)

// Webhooks stay out: cyclesd delivers events over the gRPC stream
// EventService.WatchEvents (and GET /v1/events), never by calling out. The
// spec's webhook routes therefore answer as a server on which no subscription
// can exist: lists are empty, a subscription id is 404 NOT_FOUND (its
// deliveries, replay and test too), a create is 400 INVALID_REQUEST saying
// where events are, and a bulk action matches nothing. Every answer runs
// through the chain (credentials, rate guard, request and trace ids) under
// EventService.ListEvents' rule, the read that replaces them; the admin
// routes take the admin key only. docs/http-api.md states the position.

func (a *API) webhookRoutes() {
	for _, base := range []string{"/v1/webhooks", "/v1/admin/webhooks"} {
		admin := strings.HasPrefix(base, "/v1/admin/")
		a.webhook("GET "+base, admin, func(*http.Request) (any, error) { // empty, with no next page
			return json.RawMessage(`{"subscriptions":[],"has_more":false}`), nil
		})
		a.webhook("POST "+base, admin, func(*http.Request) (any, error) {
			return nil, apierr.New(apierr.InvalidRequest, "cyclesd does not deliver webhooks, so no subscription can be created: "+
				"subscribe to events over the gRPC stream cycles.v1.EventService.WatchEvents (durable, resumable by cursor) "+
				"or poll GET /v1/events (docs/http-api.md)")
		})
		for _, p := range []string{"GET ", "PATCH ", "DELETE ", "POST /test", "GET /deliveries"} {
			method, rest, _ := strings.Cut(p, " ")
			a.webhook(method+" "+base+"/{subscription_id}"+rest, admin, noSubscription)
		}
	}
	a.webhook("POST /v1/admin/webhooks/{subscription_id}/replay", true, noSubscription)
	a.mux.HandleFunc("POST /v1/admin/webhooks/bulk-action", a.webhookBulk)
	a.mux.HandleFunc("/v1/admin/config/webhook-security", func(w http.ResponseWriter, r *http.Request) {
		a.notServed(w, r, "cyclesd delivers no webhooks, so there is no webhook URL policy; events are read over gRPC EventService.WatchEvents or GET /v1/events")
	})
}

func noSubscription(r *http.Request) (any, error) {
	id := r.PathValue("subscription_id")
	return nil, apierr.New(apierr.NotFound, "webhook subscription %q not found: cyclesd holds no webhook subscriptions "+
		"(events are delivered over gRPC EventService.WatchEvents)", id).With("subscription_id", id)
}

// webhook serves one webhook route: answer runs after the chain has
// authenticated the caller (and, on an admin route, found the admin key).
func (a *API) webhook(pattern string, admin bool, answer func(*http.Request) (any, error)) {
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		a.webhookServe(w, r, admin, nil, func() (any, error) { return answer(r) })
	})
}

func (a *API) webhookServe(w http.ResponseWriter, r *http.Request, admin bool, decodeErr error, answer func() (any, error)) {
	p, caller := runtimePlane, cyclesv1.Caller_CALLER_UNSPECIFIED
	if admin {
		p, caller = adminPlane, cyclesv1.Caller_CALLER_ADMIN
	}
	a.serve(w, r, cyclesv1.EventService_ListEvents_FullMethodName, p, http.StatusOK, &cyclesv1.ListEventsRequest{}, decodeErr,
		func(ctx context.Context, _ any) (any, error) {
			if err := checkCaller(ctx, caller); err != nil {
				return nil, err
			}
			return answer()
		},
		func(resp any) any { return resp })
}

// webhookBulk answers POST /v1/admin/webhooks/bulk-action: a well-formed
// request matches no subscription; an expected_count other than 0 is the
// spec's 409 COUNT_MISMATCH, as for any filter that matched another count.
// No proto request exists for it (cyclesd has no webhooks), so its four
// members are read from the free-form body here (action is one of three
// names, written as it is).
func (a *API) webhookBulk(w http.ResponseWriter, r *http.Request) {
	var in map[string]*structpb.Value
	body, err := a.readBody(w, r)
	if err == nil {
		in, err = protowire.DecodeFree(body)
	}
	if err == nil {
		err = webhookBulkCheck(in)
	}
	a.webhookServe(w, r, true, err, func() (any, error) {
		if n := in["expected_count"].GetNumberValue(); n != 0 {
			return nil, apierr.New(apierr.CountMismatch, "the filter matched 0 webhook subscriptions, expected_count is %d", int64(n)).
				With("total_matched", "0")
		}
		key, _ := json.Marshal(in["idempotency_key"].GetStringValue()) // a string always encodes
		return json.RawMessage(`{"action":"` + in["action"].GetStringValue() + `","total_matched":0,"succeeded":[],"failed":[],"skipped":[],` +
			`"idempotency_key":` + string(key) + `}`), nil
	})
}

func webhookBulkCheck(in map[string]*structpb.Value) error {
	for k := range in {
		if k != "filter" && k != "action" && k != "expected_count" && k != "idempotency_key" {
			return apierr.Invalid(k, "unknown field (member names are case-sensitive)")
		}
	}
	if in["filter"].GetStructValue() == nil {
		return apierr.Invalid("filter", "is required (an object)")
	}
	switch in["action"].GetStringValue() {
	case "PAUSE", "RESUME", "DELETE":
	default:
		return apierr.Invalid("action", "must be one of PAUSE, RESUME, DELETE")
	}
	if n := len(in["idempotency_key"].GetStringValue()); n < 1 || n > 128 {
		return apierr.Invalid("idempotency_key", "is required (1..128 characters)")
	}
	if c, ok := in["expected_count"]; ok {
		if n := c.GetNumberValue(); c.GetKind() != nil && (c.GetStructValue() != nil || n < 0 || n != math.Trunc(n) ||
			c.GetStringValue() != "" || c.GetBoolValue()) {
			return apierr.Invalid("expected_count", "must be an integer >= 0")
		}
	}
	return nil
}

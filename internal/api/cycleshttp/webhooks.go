package cycleshttp

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
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

// webhookCreateRefusal is the message of a refused create.
const webhookCreateRefusal = "cyclesd does not deliver webhooks, so no subscription can be created: " +
	"subscribe to events over the gRPC stream cycles.v1.EventService.WatchEvents (durable, resumable by cursor) " +
	"or poll GET /v1/events (docs/http-api.md)"

func (a *API) webhookRoutes() {
	for _, base := range []string{"/v1/webhooks", "/v1/admin/webhooks"} {
		admin := strings.HasPrefix(base, "/v1/admin/")
		a.mux.HandleFunc("GET "+base, a.webhookAnswer(admin, func(*http.Request) (any, error) {
			return &webhookListOut{Subscriptions: []struct{}{}}, nil
		}))
		a.mux.HandleFunc("POST "+base, a.webhookAnswer(admin, func(*http.Request) (any, error) {
			return nil, apierr.New(apierr.InvalidRequest, webhookCreateRefusal)
		}))
		for _, p := range []string{"GET {id}", "PATCH {id}", "DELETE {id}", "POST {id}/test", "GET {id}/deliveries"} {
			method, rest, _ := strings.Cut(p, " ")
			a.mux.HandleFunc(method+" "+base+"/"+strings.Replace(rest, "{id}", "{subscription_id}", 1), a.webhookAnswer(admin, noSubscription))
		}
	}
	a.mux.HandleFunc("POST /v1/admin/webhooks/{subscription_id}/replay", a.webhookAnswer(true, noSubscription))
	a.mux.HandleFunc("POST /v1/admin/webhooks/bulk-action", a.webhookBulk)
	a.mux.HandleFunc("/v1/admin/config/webhook-security", func(w http.ResponseWriter, r *http.Request) {
		a.notServed(w, r, "cyclesd delivers no webhooks, so there is no webhook URL policy; events are read over gRPC EventService.WatchEvents or GET /v1/events")
	})
}

type webhookListOut struct {
	Subscriptions []struct{} `json:"subscriptions"`
	NextCursor    string     `json:"next_cursor,omitempty"`
	HasMore       bool       `json:"has_more"`
}

func noSubscription(r *http.Request) (any, error) {
	id := r.PathValue("subscription_id")
	return nil, apierr.New(apierr.NotFound, "webhook subscription %q not found: cyclesd holds no webhook subscriptions "+
		"(events are delivered over gRPC EventService.WatchEvents)", id).With("subscription_id", id)
}

// webhookAnswer serves one webhook route: answer runs after the chain has
// authenticated the caller (and, on an admin route, found the admin key).
func (a *API) webhookAnswer(admin bool, answer func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a.webhookServe(w, r, admin, nil, func() (any, error) { return answer(r) })
	}
}

func (a *API) webhookServe(w http.ResponseWriter, r *http.Request, admin bool, decodeErr error, answer func() (any, error)) {
	p := runtimePlane
	if admin {
		p = adminPlane
	}
	a.serve(w, r, cyclesv1.EventService_ListEvents_FullMethodName, p, http.StatusOK, &cyclesv1.ListEventsRequest{}, decodeErr,
		func(ctx context.Context, _ any) (any, error) {
			if p, _ := auth.FromContext(ctx); admin && !p.Admin {
				return nil, apierr.New(apierr.Unauthorized, "this endpoint needs the admin key (X-Admin-API-Key)")
			}
			return answer()
		},
		func(resp any) any { return resp })
}

type webhookBulkIn struct {
	Filter         json.RawMessage `json:"filter"`
	Action         string          `json:"action"`
	ExpectedCount  *int64          `json:"expected_count"`
	IdempotencyKey string          `json:"idempotency_key"`
}

type webhookBulkOut struct {
	Action         string     `json:"action"`
	TotalMatched   int64      `json:"total_matched"`
	Succeeded      []struct{} `json:"succeeded"`
	Failed         []struct{} `json:"failed"`
	Skipped        []struct{} `json:"skipped"`
	IdempotencyKey string     `json:"idempotency_key"`
}

// webhookBulk answers POST /v1/admin/webhooks/bulk-action: a well-formed
// request matches no subscription; an expected_count other than 0 is the
// spec's 409 COUNT_MISMATCH, as for any filter that matched another count.
func (a *API) webhookBulk(w http.ResponseWriter, r *http.Request) {
	var in webhookBulkIn
	err := a.decodeJSON(w, r, &in)
	if err == nil {
		err = in.check()
	}
	a.webhookServe(w, r, true, err, func() (any, error) {
		if in.ExpectedCount != nil && *in.ExpectedCount != 0 {
			return nil, apierr.New(apierr.CountMismatch, "the filter matched 0 webhook subscriptions, expected_count is %d", *in.ExpectedCount).
				With("total_matched", "0")
		}
		return &webhookBulkOut{Action: in.Action, Succeeded: []struct{}{}, Failed: []struct{}{}, Skipped: []struct{}{},
			IdempotencyKey: in.IdempotencyKey}, nil
	})
}

func (in *webhookBulkIn) check() error {
	if f := strings.TrimSpace(string(in.Filter)); f == "" || f[0] != '{' {
		return apierr.Invalid("filter", "is required (an object)")
	}
	switch in.Action {
	case "PAUSE", "RESUME", "DELETE":
	default:
		return apierr.Invalid("action", "must be one of PAUSE, RESUME, DELETE")
	}
	if n := len(in.IdempotencyKey); n < 1 || n > 128 {
		return apierr.Invalid("idempotency_key", "is required (1..128 characters)")
	}
	if in.ExpectedCount != nil && *in.ExpectedCount < 0 {
		return apierr.Invalid("expected_count", "must be >= 0")
	}
	return nil
}

package cycleshttp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/test/errtest"
)

// A key narrowed to workspace:prod settles (commits, releases, extends) only
// reservations inside its filter, on both wires. One outside it is refused
// PERMISSION_DENIED / 403 naming reservation_id and scope_filter by the
// script that would settle it, so it stays exactly as it was; a replay of
// another key's settlement is refused the same way (it would reveal the
// answer).
func TestScopeFilterOnSettlement(t *testing.T) {
	k := newKeysEnv(t)
	perms := `,"permissions":["reservations:create","reservations:commit","reservations:release","reservations:extend","reservations:list"]`
	wide, _ := k.key(perms)
	narrow, _ := k.key(perms + `,"scope_filter":["workspace:Prod"]`)
	n := 0
	reserve := func(secret, ws string) string {
		t.Helper()
		n++
		r := k.call("POST", "/v1/reservations", "", wsReserveBody(fmt.Sprintf("res-%d", n), ws), "X-Cycles-API-Key", secret)
		if r.status != 200 {
			t.Fatalf("reserve in %s: %d %s", ws, r.status, r.body)
		}
		return r.obj(t)["reservation_id"].(string)
	}
	// state is the reservation as the wide key reads it.
	state := func(id string) string {
		t.Helper()
		r := k.call("GET", "/v1/reservations/"+id, "", "", "X-Cycles-API-Key", wide)
		if r.status != 200 {
			t.Fatalf("get %s: %d %s", id, r.status, r.body)
		}
		o := r.obj(t)
		return fmt.Sprint(o["status"], " ", o["expires_at_ms"], " ", o["extension_count"])
	}

	type op struct {
		name string
		http func(id, idem string) (method, path, body string)
		grpc func(ctx context.Context, id, idem string) error
	}
	commit := op{"commit",
		func(id, idem string) (string, string, string) {
			return "POST", "/v1/reservations/" + id + "/commit", `{"idempotency_key":"` + idem + `","actual":{"unit":"TOKENS","amount":1}}`
		},
		func(ctx context.Context, id, idem string) error {
			_, err := k.rt.CommitReservation(ctx, &cyclesv1.CommitReservationRequest{ReservationId: id, IdempotencyKey: idem,
				Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}})
			return err
		}}
	release := op{"release",
		func(id, idem string) (string, string, string) {
			return "POST", "/v1/reservations/" + id + "/release", `{"idempotency_key":"` + idem + `"}`
		},
		func(ctx context.Context, id, idem string) error {
			return errtest.ErrOf(k.rt.ReleaseReservation(ctx, &cyclesv1.ReleaseReservationRequest{ReservationId: id, IdempotencyKey: idem}))
		}}
	extend := op{"extend",
		func(id, idem string) (string, string, string) {
			return "POST", "/v1/reservations/" + id + "/extend", `{"idempotency_key":"` + idem + `","extend_by_ms":1000}`
		},
		func(ctx context.Context, id, idem string) error {
			return errtest.ErrOf(k.rt.ExtendReservation(ctx, &cyclesv1.ExtendReservationRequest{ReservationId: id, IdempotencyKey: idem, ExtendByMs: 1000}))
		}}

	for _, c := range []struct {
		op     op
		ws     string // the reservation's workspace
		replay bool   // the wide key settles it first with the same key and body
		denied bool
	}{
		{commit, "prod", false, false},
		{commit, "ops", false, true},
		{commit, "ops", true, true},
		{release, "prod", false, false},
		{release, "ops", false, true},
		{release, "ops", true, true},
		{extend, "prod", false, false},
		{extend, "ops", false, true},
		{extend, "ops", true, true},
	} {
		name := fmt.Sprintf("%s %s replay=%v", c.op.name, c.ws, c.replay)
		t.Run(name, func(t *testing.T) {
			for _, wire := range []string{"http", "grpc"} {
				owner := narrow
				if c.ws != "prod" {
					owner = wide
				}
				id := reserve(owner, c.ws)
				idem := "settle-" + wire
				if c.replay {
					method, path, body := c.op.http(id, idem)
					if r := k.call(method, path, "", body, "X-Cycles-API-Key", wide); r.status != 200 {
						t.Fatalf("wide key %s: %d %s", c.op.name, r.status, r.body)
					}
				}
				before := state(id)
				if wire == "http" {
					method, path, body := c.op.http(id, idem)
					r := k.call(method, path, "", body, "X-Cycles-API-Key", narrow)
					switch {
					case c.denied && (r.status != 403 || r.obj(t)["error"] != "FORBIDDEN"):
						t.Errorf("HTTP: %d %s, want 403", r.status, r.body)
					case c.denied:
						if d, _ := r.obj(t)["details"].(map[string]any); d["field"] != "reservation_id" || d["reason"] != "scope_filter" ||
							!strings.HasSuffix(fmt.Sprint(d["scope"]), "/workspace:ops/agent:bot") {
							t.Errorf("HTTP details %v, want reservation_id / scope_filter / the reservation's scope", d)
						}
					case r.status != 200:
						t.Errorf("HTTP: %d %s", r.status, r.body)
					}
				} else {
					err := c.op.grpc(keyCtx(narrow), id, idem)
					switch {
					case c.denied && (status.Code(err) != codes.PermissionDenied || infoOf(err)["field"] != "reservation_id" || infoOf(err)["reason"] != "scope_filter"):
						t.Errorf("gRPC: %v %v, want PERMISSION_DENIED on reservation_id", err, infoOf(err))
					case !c.denied && err != nil:
						t.Errorf("gRPC: %v", err)
					}
				}
				if after := state(id); c.denied && after != before {
					t.Errorf("%s: refused %s changed the reservation: %s -> %s", wire, c.op.name, before, after)
				} else if !c.denied && after == before {
					t.Errorf("%s: %s left the reservation unchanged: %s", wire, c.op.name, after)
				}
			}
		})
	}
}

package script

import (
	"context"
	"errors"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

const coreProbe = `
local now = now_ms()
if ARGV[1] == 'refuse' then return fail('BUDGET_EXCEEDED', 'not enough', {scope = 'tenant:a', remaining = '5'}) end
local emit = event_emitter(KEYS[1], ARGV[2], now)
emit('budget.exhausted', 'budget', 'tenant:a', {remaining = '0'})
emit('budget.debt_incurred', 'budget', 'tenant:a', {debt = '9223372036854775807'})
return ok({now = now, len = redis.call('XLEN', KEYS[1])})
`

func TestCoreHelpersOnEveryBackend(t *testing.T) {
	for _, be := range redistest.AllModes(t) {
		t.Run(be.Name, func(t *testing.T) {
			ex := probeExec(t, be.Client, map[string]string{"test/core": coreProbe}, modeOf(be)...)
			ctx := context.Background()
			stream := "cy:{t:core-" + be.Name + "}:events"
			ectx := `{"base":"00112233445566","retention_ms":604800000,"actor":"system","key_id":"","request_id":"r1","trace_id":""}`
			var out struct {
				Now int64
				Len int64
			}
			if err := ex.RunInto(ctx, &out, def("test/core"), []string{stream}, "emit", ectx); err != nil {
				t.Fatal(err)
			}
			if out.Len != 2 || out.Now < 1_700_000_000_000 {
				t.Fatalf("got %+v, want 2 events and a Redis TIME in ms", out)
			}
			msgs, err := be.Client.XRange(ctx, stream, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := msgs[1].Values["id"]; got != "evt_core-"+be.Name+"_0011223344550002" { // names its tenant
				t.Fatalf("second event id = %v", got)
			}
			if got := msgs[1].Values["data"]; got != `{"debt":"9223372036854775807"}` {
				t.Fatalf("data = %v (amounts must stay exact strings)", got)
			}
			_, err = ex.Run(ctx, def("test/core"), []string{stream}, "refuse", ectx)
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Code != apierr.BudgetExceeded || ae.Details["remaining"] != "5" || ae.Details["scope"] != "tenant:a" {
				t.Fatalf("refusal = %#v", err)
			}
		})
	}
}

func TestUnavailableWhenRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ex := probeExec(t, c, map[string]string{"test/core": coreProbe})
	srv.Kill()
	_, err := ex.Run(context.Background(), def("test/core"), []string{"cy:{t:x}:events"}, "refuse", "{}")
	if !apierr.HasCode(err, apierr.Unavailable) {
		t.Fatalf("err = %v, want UNAVAILABLE", err)
	}
}

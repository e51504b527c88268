package script

import (
	"context"
	"fmt"
	"testing"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// The event hook gets the stream and last id of a run that appended events,
// nothing for a run that appended none or was refused, and every key with an
// empty id for a call that got no reply (it may have run).
func TestEventHook(t *testing.T) {
	srv := redistest.Start(t)
	ex := probeExec(t, srv.Client(t), map[string]string{"test/core": coreProbe})
	type call struct{ stream, id string }
	var got []call
	ex.SetEventHook(func(stream, id string) { got = append(got, call{stream, id}) })
	ctx := context.Background()
	stream := "cy:{t:hook}:events"
	ectx := `{"base":"00112233445566","retention_ms":604800000,"actor":"system","key_id":"","request_id":"","trace_id":""}`
	if _, err := ex.Run(ctx, def("test/core"), []string{stream}, "emit", ectx); err != nil {
		t.Fatal(err)
	}
	last, err := srv.Client(t).XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil || len(got) != 1 || got[0] != (call{stream, last[0].ID}) {
		t.Fatalf("after an emitting run: %v (last %v, %v)", got, last, err)
	}
	if _, err := ex.Run(ctx, def("test/core"), []string{stream}, "refuse", ectx); err == nil || len(got) != 1 {
		t.Fatalf("a refusal called the hook: %v", got)
	}
	srv.Kill()
	if _, err := ex.Run(ctx, def("test/core"), []string{stream}, "emit", ectx); err == nil {
		t.Fatal("no error with Redis down")
	}
	if len(got) != 2 || got[1] != (call{stream, ""}) {
		t.Fatalf("after a call without reply: %v", got)
	}
}

const flatProbe = `
if ARGV[1] == 'emit' then
  local emit = event_emitter(KEYS[1], ARGV[2], now_ms())
  emit('budget.exhausted', 'budget', 'tenant:a', {remaining = '0'})
end
if ARGV[1] == 'refuse' then return fail('BUDGET_EXCEEDED', 'not enough', {scope = 'tenant:a'}) end
return okf({'OK', FLAT_V, '', '', 1, 'a', '', '9223372036854775807', 2})
`

// A flat reply (of any length) carries the stream and last id in its fixed
// slots: the hook hears of an emitting run, not of a quiet or refused one,
// and RunFlat hands back the fields as sent.
func TestEventHookFlatReply(t *testing.T) {
	for _, be := range redistest.AllModes(t) {
		t.Run(be.Name, func(t *testing.T) {
			ex := probeExec(t, be.Client, map[string]string{"test/flat": flatProbe}, modeOf(be)...)
			type call struct{ stream, id string }
			var got []call
			ex.SetEventHook(func(stream, id string) { got = append(got, call{stream, id}) })
			ctx := context.Background()
			stream := "cy:{t:flat-" + be.Name + "}:events"
			ectx := `{"base":"00112233445566","retention_ms":604800000,"actor":"system","key_id":"","request_id":"","trace_id":""}`
			res, err := ex.RunFlat(ctx, def("test/flat"), []string{stream}, "quiet", ectx)
			if err != nil {
				t.Fatal(err)
			}
			want := []any{int64(1), "a", "", "9223372036854775807", int64(2)}
			if len(res) != FlatFields+len(want) || fmt.Sprint(res[FlatFields:]) != fmt.Sprint(want) || len(got) != 0 {
				t.Fatalf("quiet run: %#v, hook %v", res, got)
			}
			if _, err := ex.RunFlat(ctx, def("test/flat"), []string{stream}, "emit", ectx); err != nil {
				t.Fatal(err)
			}
			last, err := be.Client.XRevRangeN(ctx, stream, "+", "-", 1).Result()
			if err != nil || len(got) != 1 || got[0] != (call{stream, last[0].ID}) {
				t.Fatalf("after an emitting run: %v (last %v, %v)", got, last, err)
			}
			if _, err := ex.RunFlat(ctx, def("test/flat"), []string{stream}, "refuse", ectx); err == nil || len(got) != 1 {
				t.Fatalf("refusal: %v, hook %v", err, got)
			}
			if _, err := ex.Run(ctx, def("test/flat"), []string{stream}, "quiet", ectx); err == nil {
				t.Fatal("Run accepted a flat reply")
			}
		})
	}
}

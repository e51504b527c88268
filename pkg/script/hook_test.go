package script

import (
	"context"
	"testing"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// The event hook gets the stream and last id of a run that appended events,
// nothing for a run that appended none or was refused, and every key with an
// empty id for a call that got no reply (it may have run).
func TestEventHook(t *testing.T) {
	srv := redistest.Start(t)
	ex, err := newWith(srv.Client(t), map[string]string{"test/core": coreProbe})
	if err != nil {
		t.Fatal(err)
	}
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

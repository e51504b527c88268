package archiver

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledger"
)

// TestReplayPastHotWindow: a commit or release replayed (same key, same
// payload) after its reservation left Redis answers from the archive with
// the bytes of the original answer; a different payload under the key is
// IDEMPOTENCY_MISMATCH and another settlement RESERVATION_FINALIZED or
// RESERVATION_EXPIRED, as while in Redis; none of them writes anything (the
// record stays gone, the budget unchanged).
func TestReplayPastHotWindow(t *testing.T) {
	const tn = "arc-replay"
	r := newRig(t, tn)
	rd := Reader{Store: r.store}
	r.led = ledger.New(r.exec, ledger.Options{Archive: true, Archived: rd.Reservation})
	type call struct {
		name string
		do   func() (proto.Message, error)
	}
	var calls []call
	var ids []string
	for i := 0; i < 3; i++ {
		res, err := r.led.Reserve(r.ctx, tn, &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("rp-%d", i),
			Subject: &cyclesv1.Subject{Workspace: "prod", Agent: "a"}, Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
			Estimate: tokens(100)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.GetReservationId())
	}
	commit := func(id, key string, n int64) func() (proto.Message, error) {
		return func() (proto.Message, error) {
			return r.led.Commit(r.ctx, tn, &cyclesv1.CommitReservationRequest{ReservationId: id, IdempotencyKey: key, Actual: tokens(n)})
		}
	}
	release := func(id, key, reason string) func() (proto.Message, error) {
		return func() (proto.Message, error) {
			return r.led.Release(r.ctx, tn, &cyclesv1.ReleaseReservationRequest{ReservationId: id, IdempotencyKey: key, Reason: reason})
		}
	}
	// Settle: ids[0] committed (with an overage), ids[1] released, ids[2]
	// expired (set by hand as the sweeper leaves it).
	first := []call{
		{"commit", commit(ids[0], "c0", 130)},
		{"release", release(ids[1], "r1", "done")},
	}
	var originals [][]byte
	for _, c := range first {
		m, err := c.do()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		originals = append(originals, marshal(t, m))
	}
	tk := keys.Tenant(tn)
	if _, err := release(ids[2], "r2x", "")(); err != nil { // queued for the archive
		t.Fatal(err)
	}
	r.c.HSet(r.ctx, tk.Reservation(ids[2]), "state", "EXPIRED", "expired_at", "1790000000000")
	r.c.HDel(r.ctx, tk.Reservation(ids[2]), "finalized_at")
	calls = []call{
		{"commit replay", commit(ids[0], "c0", 130)},
		{"release replay", release(ids[1], "r1", "done")},
		{"commit, other payload", commit(ids[0], "c0", 131)},
		{"release, other payload", release(ids[1], "r1", "other")},
		{"commit of a released one", commit(ids[1], "c1", 10)},
		{"release of a committed one", release(ids[0], "r0", "")},
		{"commit of an expired one", commit(ids[2], "c2", 10)},
		{"release of an expired one", release(ids[2], "r2", "")},
	}
	answer := func(c call) []byte {
		m, err := c.do()
		if err != nil {
			return []byte("error: " + err.Error())
		}
		return marshal(t, m)
	}
	golden := make([][]byte, len(calls))
	for i, c := range calls {
		golden[i] = answer(c)
	}
	for i := range originals {
		if !bytes.Equal(golden[i], originals[i]) {
			t.Fatalf("%s in Redis is not the original answer", calls[i].name)
		}
	}
	for i, c := range calls[2:] {
		if !bytes.HasPrefix(golden[i+2], []byte("error: ")) {
			t.Fatalf("%s: answered, want a refusal", c.name)
		}
	}
	if _, err := r.archiver(ArchiverOptions{}).Once(r.ctx); err != nil || r.rows(tn) != 3 || r.queued(tn) != 0 {
		t.Fatalf("archived %d rows, %d still queued: %v", r.rows(tn), r.queued(tn), err)
	}
	r.c.Del(r.ctx, tk.Reservation(ids[0]), tk.Reservation(ids[1]), tk.Reservation(ids[2])) // past the hot window
	budget := r.c.HGetAll(r.ctx, tk.Prefix()+"b:tenant:"+tn+":TOKENS").Val()
	if len(budget) == 0 {
		t.Fatal("no budget hash to compare")
	}
	for i, c := range calls {
		if got := answer(c); !bytes.Equal(got, golden[i]) {
			t.Fatalf("%s from the archive:\n%q\nfrom Redis:\n%q", c.name, got, golden[i])
		}
	}
	for _, id := range ids {
		if r.c.Exists(r.ctx, tk.Reservation(id)).Val() != 0 {
			t.Fatalf("%s: an answer from the archive wrote the record back", id)
		}
	}
	after := r.c.HGetAll(r.ctx, tk.Prefix()+"b:tenant:"+tn+":TOKENS").Val()
	if fmt.Sprint(after) != fmt.Sprint(budget) {
		t.Fatalf("budget moved: %v -> %v", budget, after)
	}
	// Never archived: NOT_FOUND, as before.
	if _, err := commit("r_"+tn+"_0123456789abcdef0123456789abcdef", "cx", 1)(); !apierr.HasCode(err, apierr.NotFound) {
		t.Fatalf("never archived: %v", err)
	}
}

package admin

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

// A funding idempotency record written before the shared compact format
// (JSON {"h": 64-hex payload hash, "r": answer}, lua/lib/idem.lua) still
// replays byte for byte and still refuses another request.
func TestFundingReplaysLegacyRecord(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	sp := e.seedBudget(id, "agent:legacy", ledgerState{allocated: "100"})
	first := mustCall(t, e.ctx, fund(id, sp, credit, 40, "pay-old"), e.svc.FundBudget)

	key := keys.Tenant(id).Idempotency("fund", "pay-old")
	raw := e.rdb.Get(context.Background(), key).Val()
	hash, resp, found := strings.Cut(strings.TrimPrefix(raw, "j"), ":")
	b, err := base64.RawURLEncoding.DecodeString(hash)
	if !strings.HasPrefix(raw, "j") || !found || err != nil {
		t.Fatalf("compact record = %q", raw)
	}
	legacy, _ := json.Marshal(map[string]string{"h": hex.EncodeToString(b) + strings.Repeat("f", 32), "r": resp})
	e.rdb.Set(context.Background(), key, legacy, FundingReplayWindow)
	snap := e.snapshot(id)

	again := mustCall(t, e.ctx, fund(id, sp, credit, 40, "pay-old"), e.svc.FundBudget)
	det := proto.MarshalOptions{Deterministic: true}
	x, _ := det.Marshal(first)
	y, _ := det.Marshal(again)
	if string(x) != string(y) {
		t.Fatalf("legacy replay = %v, first = %v", again, first)
	}
	_, err = call(e.ctx, fund(id, sp, credit, 41, "pay-old"), e.svc.FundBudget)
	wantRefused(t, err, codes.AlreadyExists, apierr.IdempotencyMismatch)
	e.unchanged(id, snap)
}

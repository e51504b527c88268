package opsapi_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// A packed balance whose amounts all parse but whose form the ledger refuses
// (here a leading zero, an unknown status, a flag that is not 0|1): the
// reserve fails closed with INTERNAL_ERROR and writes nothing, and the audit
// names the budget (BUDGET_FIELD_INVALID, field bal) instead of calling it
// sound.
func TestAuditFlagsABalanceTheLedgerRefuses(t *testing.T) {
	for _, patch := range []map[string]string{{"remaining": "01000"}, {"status": "PAUSED"}, {"is_over_limit": "x"}} {
		e := newEnv(t)
		e.budget("w")
		key := keys.Tenant(e.tenant).Budget(e.ws("w"), "TOKENS")
		ledgertest.PatchBalance(t, e.c, key, patch)
		before := ledgertest.Dump(t, e.c, e.tenant)
		_, err := e.rt.CreateReservation(grpctest.AsTenant(context.Background(), e.tenant), &cyclesv1.CreateReservationRequest{
			IdempotencyKey: "k", Subject: &cyclesv1.Subject{Workspace: "w"},
			Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}})
		if status.Code(err) != codes.Internal {
			t.Fatalf("%v: reserve = %v, want INTERNAL_ERROR", patch, err)
		}
		if after := ledgertest.Dump(t, e.c, e.tenant); after != before {
			t.Fatalf("%v: a refused reserve wrote:\n%s\n->\n%s", patch, before, after)
		}
		found := e.audit().GetDiscrepancies()
		if len(found) != 1 || found[0].GetKind() != "BUDGET_FIELD_INVALID" || found[0].GetScopePath() != e.ws("w") ||
			found[0].GetEvidence()["field"] != "bal" || found[0].GetRepairable() {
			t.Fatalf("%v: audit found %v", patch, found)
		}
	}
}

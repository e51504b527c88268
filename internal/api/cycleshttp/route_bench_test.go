package cycleshttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/server"
)

// directInvoker runs the handler without the chain: the benchmark measures
// this package's own work (route, decode, encode), not the ledger's.
type directInvoker struct{}

func (directInvoker) Invoke(ctx context.Context, _ string, _ metadata.MD, req any, h grpc.UnaryHandler) (any, metadata.MD, error) {
	resp, err := h(ctx, req)
	return resp, nil, err
}

type fixedRuntime struct {
	cyclesv1.UnimplementedRuntimeServiceServer
}

func (fixedRuntime) CreateReservation(context.Context, *cyclesv1.CreateReservationRequest) (*cyclesv1.CreateReservationResponse, error) {
	amt := &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 100}
	ttl := int64(60000)
	return &cyclesv1.CreateReservationResponse{Decision: cyclesv1.Decision_DECISION_ALLOW, ReservationId: "r_tenant_0123456789abcdef",
		Reserved: amt, ExpiresAtMs: 1767225600000, RemainingTtlMs: &ttl, ScopePath: "tenant:t/workspace:w",
		AffectedScopes: []string{"tenant:t", "tenant:t/workspace:w"}}, nil
}

// BenchmarkReserveRoute: one POST /v1/reservations through the HTTP layer
// (allocations are the stable figure on a loaded machine).
func BenchmarkReserveRoute(b *testing.B) {
	a := New(Options{Invoker: directInvoker{}, Services: server.Services{Runtime: fixedRuntime{}}})
	body := `{"idempotency_key":"k1","subject":{"tenant":"t","workspace":"w"},"action":{"kind":"llm.completion","name":"gpt"},` +
		`"estimate":{"unit":"TOKENS","amount":100},"ttl_ms":60000}`
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/reservations", strings.NewReader(body))
		w := httptest.NewRecorder()
		a.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

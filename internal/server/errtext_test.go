package server

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
)

// A store failure reaches the client as UNAVAILABLE with the fixed message
// and its reason; the cause, which names Redis's address, is only logged.
func TestStoreFailureHidesInternalAddress(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	conn, _, _, _ := startLogged(t, &fakeRuntime{}, zap.New(core))
	ctx := withMD(auth.APIKeyHeader, "good-key", auth.RequestIDHeader, "req-down")
	_, err := cyclesv1.NewRuntimeServiceClient(conn).GetReservation(ctx, &cyclesv1.GetReservationRequest{ReservationId: "storedown"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("code = %v", err)
	}
	if code, _, _ := apierr.FromStatus(err); code != apierr.Unavailable {
		t.Fatalf("reason = %q", code)
	}
	if msg := status.Convert(err).Message(); msg != "UNAVAILABLE: budget store unavailable" {
		t.Fatalf("client sees %q", msg)
	}
	logged := false
	for _, e := range logs.All() {
		for _, f := range e.Context {
			if f.Key == "error" && strings.Contains(f.Interface.(error).Error(), "127.0.0.1:21379") {
				logged = true
			}
		}
	}
	if !logged {
		t.Fatalf("the cause is not in the log: %v", logs.All())
	}
}

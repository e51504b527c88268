package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
)

// rpcLine runs one GetReservation (id decides the outcome) against a server
// logging at level and returns the RPC's log line (nil if none).
func rpcLine(t *testing.T, level zapcore.Level, id string) map[string]any {
	t.Helper()
	core, logs := observer.New(level)
	conn, _, _, _ := startLogged(t, &fakeRuntime{}, zap.New(core))
	ctx := withMD(auth.APIKeyHeader, "good-key", auth.RequestIDHeader, "req-"+id)
	_, _ = cyclesv1.NewRuntimeServiceClient(conn).GetReservation(ctx, &cyclesv1.GetReservationRequest{ReservationId: id})
	var line map[string]any
	for _, e := range logs.All() {
		if e.ContextMap()["grpc.method"] == "GetReservation" {
			if line != nil {
				t.Fatalf("two lines for one RPC: %v", logs.All())
			}
			line = e.ContextMap()
		}
	}
	return line
}

// With debug off, an error's line is replayed through the middleware: the
// same fields as the full path, with the real start time and duration.
func TestLoggingGateReplaysErrorsWithTheSameFields(t *testing.T) {
	for _, id := range []string{"budget", "opaque", "slow"} {
		t.Run(id, func(t *testing.T) {
			full := rpcLine(t, zapcore.DebugLevel, id)
			gated := rpcLine(t, zapcore.InfoLevel, id)
			if full == nil || gated == nil {
				t.Fatalf("missing line: full %v gated %v", full, gated)
			}
			if fmt.Sprint(slices.Sorted(maps.Keys(full))) != fmt.Sprint(slices.Sorted(maps.Keys(gated))) {
				t.Fatalf("fields differ:\n full  %v\n gated %v", slices.Sorted(maps.Keys(full)), slices.Sorted(maps.Keys(gated)))
			}
			for _, k := range []string{"grpc.code", "tenant", "reason", "grpc.service", "grpc.method", "grpc.component"} {
				if fmt.Sprint(full[k]) != fmt.Sprint(gated[k]) {
					t.Errorf("%s: full %v, gated %v", k, full[k], gated[k])
				}
			}
			if gated["request_id"] != "req-"+id {
				t.Errorf("request_id = %v", gated["request_id"])
			}
			if _, err := time.Parse(time.RFC3339, fmt.Sprint(gated["grpc.start_time"])); err != nil {
				t.Errorf("grpc.start_time %v: %v", gated["grpc.start_time"], err)
			}
			if id == "slow" {
				// The handler waits for the 200 ms request deadline: the
				// replayed duration is the real one, not the replay's.
				ms, err := strconv.ParseFloat(fmt.Sprint(gated["grpc.time_ms"]), 64)
				if err != nil || ms < 150 {
					t.Errorf("grpc.time_ms = %v (%v), want the handler's ~200 ms", gated["grpc.time_ms"], err)
				}
			}
		})
	}
}

func TestLoggingGateWritesNoLineForOKAtInfo(t *testing.T) {
	if line := rpcLine(t, zapcore.InfoLevel, "ok"); line != nil {
		t.Fatalf("an OK call logged at info level: %v", line)
	}
	if line := rpcLine(t, zapcore.DebugLevel, "ok"); line == nil || line["grpc.code"] != "OK" {
		t.Fatalf("an OK call at debug level: %v", line)
	}
	// Above the errors' level nothing is replayed either.
	if line := rpcLine(t, zapcore.ErrorLevel, "budget"); line != nil {
		t.Fatalf("an info-level error logged at error level: %v", line)
	}
}

// An OK call costs the logging layer no allocation when debug is off.
func TestLoggingGateDoesNotAllocateForOK(t *testing.T) {
	core, _ := observer.New(zapcore.InfoLevel)
	c := &chain{log: zap.New(core)}
	c.unaryInterceptors()
	ctx := context.Background()
	info := &grpc.UnaryServerInfo{FullMethod: "/cycles.v1.RuntimeService/GetReservation"}
	h := func(context.Context, any) (any, error) { return nil, nil }
	allocs := testing.AllocsPerRun(100, func() { _, _ = c.loggingUnary(ctx, nil, info, h) })
	if allocs != 0 {
		t.Fatalf("%v allocations per OK call", allocs)
	}
	// The middleware on its own (debug on) does allocate: the gate is what
	// makes the difference.
	dcore, _ := observer.New(zapcore.DebugLevel)
	d := &chain{log: zap.New(dcore)}
	d.unaryInterceptors()
	if a := testing.AllocsPerRun(100, func() { _, _ = d.loggingUnary(ctx, nil, info, h) }); a == 0 {
		t.Fatal("expected the ungated middleware to allocate")
	}
}

// A client's own cancel (a WatchEvents stream hung up, a call given up) is
// not a failed call: it is logged at debug, like a success, so the default
// info level shows no line for it. Failures keep their levels.
func TestLogLevelByCode(t *testing.T) {
	cases := []struct {
		code codes.Code
		want logging.Level
	}{
		{codes.OK, logging.LevelDebug},
		{codes.Canceled, logging.LevelDebug},
		{codes.InvalidArgument, logging.LevelInfo},
		{codes.FailedPrecondition, logging.LevelInfo},
		{codes.DeadlineExceeded, logging.LevelInfo},
		{codes.Unavailable, logging.LevelWarn},
		{codes.Internal, logging.LevelError},
		{codes.Unknown, logging.LevelError},
	}
	for _, tc := range cases {
		if got := levelFor(tc.code); got != tc.want {
			t.Errorf("levelFor(%s) = %v, want %v", tc.code, got, tc.want)
		}
	}
}

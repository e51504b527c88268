package script

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

func TestEveryScriptCallIsASpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ex := probeExec(t, redistest.Embedded(t), map[string]string{"test/core": coreProbe})
	WithTracerProvider(tp)(ex)
	ctx, parent := tp.Tracer("t").Start(context.Background(), "rpc")
	_, err := ex.Run(ctx, def("test/core"), []string{"cy:{t:x}:events"}, "refuse", "{}")
	parent.End()
	if err == nil {
		t.Fatal("want the probe's refusal")
	}
	spans := rec.Ended()
	if len(spans) != 2 || spans[0].Name() != "redis.script test/core" {
		t.Fatalf("spans = %v", spans)
	}
	if spans[0].Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatal("script span is not a child of the RPC span")
	}
	found := false
	for _, a := range spans[0].Attributes() {
		if a.Key == "cycles.refusal" && a.Value.AsString() == "BUDGET_EXCEEDED" {
			found = true
		}
	}
	if !found {
		t.Fatalf("refusal not recorded on the span: %v", spans[0].Attributes())
	}
}

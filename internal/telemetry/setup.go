package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Providers are the process's metric and trace providers.
type Providers struct {
	Meter  *sdkmetric.MeterProvider
	Tracer trace.TracerProvider
	// Metrics serves the Prometheus exposition (mount at /metrics).
	Metrics http.Handler
	// Shutdown flushes exporters.
	Shutdown func(context.Context) error
}

// Setup builds the providers: metrics always for Prometheus (own registry,
// so tests can build several) and also over OTLP when the standard
// OTEL_EXPORTER_OTLP_(METRICS_)ENDPOINT variables ask for it; traces exported
// over OTLP only when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set.
// W3C traceparent propagation is installed globally.
func Setup(ctx context.Context, service string) (*Providers, error) {
	// Schemaless: the SDK's default resource carries its own semconv schema
	// URL, which would conflict with the one of our semconv import.
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	readers := []sdkmetric.Option{sdkmetric.WithReader(exp), sdkmetric.WithResource(res)}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != "" {
		me, err := otlpmetricgrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp metric exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me)))
	}
	mp := sdkmetric.NewMeterProvider(readers...)

	// Without an exporter, spans would be recorded for nobody: use the no-op
	// provider, which still carries an incoming traceparent's trace id.
	var tp trace.TracerProvider = noop.NewTracerProvider()
	shutdowns := []func(context.Context) error{mp.Shutdown}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		te, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		stp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(te))
		shutdowns = append(shutdowns, stp.Shutdown)
		tp = stp
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))

	return &Providers{
		Meter:   mp,
		Tracer:  tp,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		Shutdown: func(ctx context.Context) error {
			var errs []error
			for _, s := range shutdowns {
				errs = append(errs, s(ctx))
			}
			return errors.Join(errs...)
		},
	}, nil
}

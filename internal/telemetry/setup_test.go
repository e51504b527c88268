package telemetry

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// setupFor is Setup for one test, shut down when it ends.
func setupFor(t *testing.T, service string) *Providers {
	t.Helper()
	p, err := Setup(context.Background(), service)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p
}

// scrape is the Prometheus exposition p's metrics handler serves.
func scrape(p *Providers) []byte {
	rec := httptest.NewRecorder()
	p.Metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	return body
}

func TestSetupExposesMetricsForPrometheus(t *testing.T) {
	p := setupFor(t, "cyclesd-test")
	MustCounter(Meter(p.Meter, "test"), "cycles.test.things", "things").Add(context.Background(), 3)
	body := scrape(p)
	if !strings.Contains(string(body), "cycles_test_things_total") || !strings.Contains(string(body), `service_name="cyclesd-test"`) {
		t.Fatalf("exposition lacks the counter or the service name:\n%s", body)
	}
}

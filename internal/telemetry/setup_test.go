package telemetry

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestSetupExposesMetricsForPrometheus(t *testing.T) {
	p, err := Setup(context.Background(), "cyclesd-test")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	MustCounter(Meter(p.Meter, "test"), "cycles.test.things", "things").Add(context.Background(), 3)
	srv := httptest.NewServer(p.Metrics)
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(body), "cycles_test_things_total") || !strings.Contains(string(body), `service_name="cyclesd-test"`) {
		t.Fatalf("exposition lacks the counter or the service name:\n%s", body)
	}
}

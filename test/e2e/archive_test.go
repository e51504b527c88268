package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/pgtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// callIDs are the per-call fields of an error body.
var callIDs = regexp.MustCompile(`,?"(request_id|trace_id)":"[^"]*"`)

// startArchiving starts the real binary on a fresh Redis with the archive on
// (a new database of the shared PostgreSQL) and the HTTP listener, args
// adding further flags, and waits until it serves. It returns the Redis, the
// archive's DSN, the daemon and the HTTP address.
func startArchiving(t *testing.T, args ...string) (*redistest.Server, string, *daemon, string) {
	t.Helper()
	srv := redistest.Start(t)
	dsn := pgtest.NewDatabase(t, pgtest.Start(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	d := startDaemon(t, []string{"CYCLESD_REDIS_ADDRS=" + srv.Addr, "CYCLESD_ADMIN_KEY=" + adminKey, "CYCLESD_ARCHIVE_DSN=" + dsn},
		append([]string{"-http-listen", httpAddr}, args...)...)
	d.waitServing(t)
	return srv, dsn, d, httpAddr
}

// TestArchiveGoldensOnTheBinary: the real binary with an archive and a
// 1 s hot window. Every read of a settled reservation (get, list) and every
// commit and release replay answers, on gRPC and on HTTP, with the same
// bytes after the reservation left Redis (served from PostgreSQL) as
// before; usage reports count it.
func TestArchiveGoldensOnTheBinary(t *testing.T) {
	srv, _, d, httpAddr := startArchiving(t, "-hot-retention", "1s")
	conn := d.conn(t)
	admin := cyclesv1.NewAdminServiceClient(conn)
	rt := cyclesv1.NewRuntimeServiceClient(conn)
	const tn = "arch"
	if _, err := admin.CreateTenant(adminCtx(), &cyclesv1.CreateTenantRequest{TenantId: tn, Name: "Archive"}); err != nil {
		t.Fatal(err)
	}
	k, err := admin.CreateApiKey(adminCtx(), &cyclesv1.CreateApiKeyRequest{TenantId: tn, Name: "agents"})
	if err != nil {
		t.Fatal(err)
	}
	key := k.GetSecret()
	if _, err := admin.CreateBudget(adminCtx(), &cyclesv1.CreateBudgetRequest{TenantId: tn, ScopePath: "tenant:" + tn,
		Unit: cyclesv1.Unit_UNIT_TOKENS, Allocated: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	tok := func(n int64) *cyclesv1.Amount { return &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: n} }
	var ids []string
	for i := 0; i < 2; i++ {
		res, err := rt.CreateReservation(keyCtx(key), &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("g%d", i),
			Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"}, Estimate: tok(500)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.GetReservationId())
	}
	base := "http://" + httpAddr
	tenantHdr := []string{"X-Cycles-API-Key", key}
	var hdr []string
	http1 := func(method, path, body string, as ...string) []byte {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		hdr = tenantHdr
		if len(as) == 2 {
			hdr = as
		}
		req.Header.Set(hdr[0], hdr[1])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		// An error body names its own call (request and trace ids).
		raw = callIDs.ReplaceAll(raw, nil)
		return append([]byte(fmt.Sprintf("%d ", resp.StatusCode)), raw...)
	}
	grpc1 := func(m proto.Message, err error) []byte {
		t.Helper()
		if err != nil {
			return []byte("error: " + err.Error())
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	commitBody := `{"idempotency_key":"c0","actual":{"unit":"TOKENS","amount":420}}`
	releaseBody := `{"idempotency_key":"r1"}`
	if b := http1("POST", "/v1/reservations/"+ids[0]+"/commit", commitBody); !bytes.HasPrefix(b, []byte("200 ")) {
		t.Fatalf("commit: %s", b)
	}
	if b := http1("POST", "/v1/reservations/"+ids[1]+"/release", releaseBody); !bytes.HasPrefix(b, []byte("200 ")) {
		t.Fatalf("release: %s", b)
	}
	reads := []struct {
		name string
		do   func() []byte
	}{
		{"gRPC get committed", func() []byte {
			return grpc1(rt.GetReservation(keyCtx(key), &cyclesv1.GetReservationRequest{ReservationId: ids[0]}))
		}},
		{"gRPC get released", func() []byte {
			return grpc1(rt.GetReservation(keyCtx(key), &cyclesv1.GetReservationRequest{ReservationId: ids[1]}))
		}},
		{"gRPC list", func() []byte { return grpc1(rt.ListReservations(keyCtx(key), &cyclesv1.ListReservationsRequest{})) }},
		{"gRPC list committed, asc", func() []byte {
			return grpc1(rt.ListReservations(keyCtx(key), &cyclesv1.ListReservationsRequest{
				Status: cyclesv1.ReservationStatus_RESERVATION_STATUS_COMMITTED, SortDir: cyclesv1.SortDirection_SORT_DIRECTION_ASC}))
		}},
		{"gRPC commit replay", func() []byte {
			return grpc1(rt.CommitReservation(keyCtx(key), &cyclesv1.CommitReservationRequest{ReservationId: ids[0], IdempotencyKey: "c0", Actual: tok(420)}))
		}},
		{"gRPC release replay", func() []byte {
			return grpc1(rt.ReleaseReservation(keyCtx(key), &cyclesv1.ReleaseReservationRequest{ReservationId: ids[1], IdempotencyKey: "r1"}))
		}},
		{"HTTP get committed", func() []byte { return http1("GET", "/v1/reservations/"+ids[0], "") }},
		{"HTTP get released", func() []byte { return http1("GET", "/v1/reservations/"+ids[1], "") }},
		{"HTTP list", func() []byte { return http1("GET", "/v1/reservations", "") }},
		{"HTTP list released", func() []byte { return http1("GET", "/v1/reservations?status=RELEASED&sort_by=reserved", "") }},
		{"HTTP commit replay", func() []byte { return http1("POST", "/v1/reservations/"+ids[0]+"/commit", commitBody) }},
		{"HTTP release replay", func() []byte { return http1("POST", "/v1/reservations/"+ids[1]+"/release", releaseBody) }},
		{"gRPC commit, other payload", func() []byte {
			return grpc1(rt.CommitReservation(keyCtx(key), &cyclesv1.CommitReservationRequest{ReservationId: ids[0], IdempotencyKey: "c0", Actual: tok(421)}))
		}},
		{"HTTP commit, other payload", func() []byte {
			return http1("POST", "/v1/reservations/"+ids[0]+"/commit", strings.Replace(commitBody, "420", "421", 1))
		}},
	}
	golden := make([][]byte, len(reads))
	for i, r := range reads {
		golden[i] = r.do()
	}
	// The archiver copies both, then their 1 s hot window runs out.
	rc := srv.Client(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		n := rc.Exists(context.Background(), keys.Tenant(tn).Reservation(ids[0]), keys.Tenant(tn).Reservation(ids[1])).Val()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the records are still in Redis after 60 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i, r := range reads {
		if got := r.do(); !bytes.Equal(got, golden[i]) {
			t.Fatalf("%s past the hot window:\n%s\nwhile in Redis:\n%s", r.name, got, golden[i])
		}
	}
	us, err := cyclesv1.NewUsageServiceClient(conn).QueryUsage(adminCtx(), &cyclesv1.QueryUsageRequest{TenantId: tn,
		FromMs: time.Now().Add(-time.Hour).UnixMilli(), ToMs: time.Now().Add(time.Hour).UnixMilli(), ScopeDepth: 1})
	if err != nil || len(us.GetRows()) != 1 || us.GetRows()[0].GetCommitted() != 420 || us.GetRows()[0].GetReleased() != 500 {
		t.Fatalf("usage: %v %v", us, err)
	}
	from, to := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	b := http1("GET", "/v1/admin/usage?tenant_id="+tn+"&from="+from+"&to="+to+"&bucket=hour&scope_depth=1", "", "X-Admin-API-Key", adminKey)
	if !bytes.HasPrefix(b, []byte("200 ")) || !bytes.Contains(b, []byte(`"committed":420`)) || !bytes.Contains(b, []byte(`"released":500`)) ||
		!bytes.Contains(b, []byte(`"scope":"tenant:arch"`)) || !bytes.Contains(b, []byte(`"unit":"TOKENS"`)) {
		t.Fatalf("HTTP usage: %s", b)
	}
	if b := http1("GET", "/v1/admin/usage?tenant_id="+tn+"&from="+from+"&to="+to, ""); bytes.HasPrefix(b, []byte("200 ")) {
		t.Fatalf("HTTP usage with a tenant key: %s", b)
	}
	if b := http1("GET", "/v1/admin/usage?tenant_id="+tn+"&from="+from, "", "X-Admin-API-Key", adminKey); !bytes.HasPrefix(b, []byte("400 ")) || !bytes.Contains(b, []byte("to")) {
		t.Fatalf("HTTP usage without to: %s", b)
	}
}

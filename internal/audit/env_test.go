package audit_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/admin"
	"github.com/cyclesgo/cycles-go/internal/api/adminapi"
	"github.com/cyclesgo/cycles-go/internal/api/auditapi"
	"github.com/cyclesgo/cycles-go/internal/api/cycleshttp"
	"github.com/cyclesgo/cycles-go/internal/api/operatorapi"
	"github.com/cyclesgo/cycles-go/internal/api/opsapi"
	"github.com/cyclesgo/cycles-go/internal/api/policyapi"
	"github.com/cyclesgo/cycles-go/internal/api/runtimeapi"
	"github.com/cyclesgo/cycles-go/internal/audit"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/bulk"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/ledgerops"
	"github.com/cyclesgo/cycles-go/internal/policy"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/httpjson"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// env is cyclesd's shell (production chain with the audit step) serving the
// admin, ops, runtime and audit services on a real gRPC listener and the
// Cycles HTTP wire, so entries carry a real source address.
type env struct {
	t    testing.TB
	c    redis.UniversalClient
	svc  *audit.Service
	adm  cyclesv1.AdminServiceClient
	ops  cyclesv1.OpsServiceClient
	rt   cyclesv1.RuntimeServiceClient
	aud  cyclesv1.AuditServiceClient
	op   cyclesv1.OperatorServiceClient
	pol  cyclesv1.PolicyServiceClient
	qc   cyclesv1.QuotaCounterServiceClient
	base string
}

var reqSeq atomic.Int64

// newRequestID is a request id no other call of the test run uses.
func newRequestID(testing.TB) string {
	return "req-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(reqSeq.Add(1), 10)
}

func start(t testing.TB, opts audit.Options) *env {
	t.Helper()
	return startOn(t, redistest.SharedClient(t), opts)
}

func startOn(t testing.TB, c redis.UniversalClient, opts audit.Options) *env {
	t.Helper()
	return startWith(t, c, opts, true)
}

// startWith serves with the audit step, or (audited false) without it, as
// cyclesd did before the audit trail.
func startWith(t testing.TB, c redis.UniversalClient, opts audit.Options, audited bool) *env {
	t.Helper()
	ex := scripttest.On(t, c)
	led := ledger.New(ex, ledger.Options{})
	adm := admin.New(ex, admin.Options{Releaser: led})
	aud := audit.New(ex, opts)
	svcs := server.Services{
		Runtime: runtimeapi.New(led),
		Admin:   adminapi.New(adm),
		Ops:     opsapi.New(sweeper.New(ex, sweeper.Options{}), ledgerops.New(ex, ledgerops.Options{})),
		Audit:   auditapi.New(aud),
	}
	svcs.Operator = operatorapi.New(bulk.New(ex, adm, aud))
	pols := policy.New(ex, policy.Options{})
	svcs.Policy = policyapi.New(pols)
	svcs.QuotaCounters = policyapi.NewQuotaCounters(pols)
	so := server.Options{Verifier: grpctest.Verifier{}, AdminKey: grpctest.AdminKey, RequestTimeout: 5 * time.Second}
	if audited {
		so.Audit = aud
	}
	srv := server.New(so, svcs)
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.GRPC.Serve(glis) }()
	t.Cleanup(srv.GRPC.Stop)
	conn, err := grpc.NewClient(glis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent("audit-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	hs := srv.NewHTTP(server.HTTPOptions{})
	hs.Handle("/v1/", cycleshttp.New(cycleshttp.Options{Invoker: srv, Services: svcs}))
	base := httpjson.Serve(t, hs)
	return &env{t: t, c: c, svc: aud, adm: cyclesv1.NewAdminServiceClient(conn), ops: cyclesv1.NewOpsServiceClient(conn),
		rt: cyclesv1.NewRuntimeServiceClient(conn), aud: cyclesv1.NewAuditServiceClient(conn),
		op: cyclesv1.NewOperatorServiceClient(conn), pol: cyclesv1.NewPolicyServiceClient(conn),
		qc: cyclesv1.NewQuotaCounterServiceClient(conn), base: base}
}

// admin is a context calling with the admin key and request id rid.
func adminCtx(rid string) context.Context {
	return metadata.AppendToOutgoingContext(grpctest.AsAdmin(context.Background()), auth.RequestIDHeader, rid)
}

// tenant makes a fresh tenant (HTTP-safe id) with a 1,000-token tenant budget.
func (e *env) tenant() string {
	e.t.Helper()
	id := strings.ReplaceAll(ledgertest.NewTenantID(e.t), "_", "-")
	ledgertest.SeedTenant(e.t, e.c, id, ledgertest.Tenant{})
	ledgertest.SeedBudget(e.t, e.c, id, ledgertest.Budget{Scope: "tenant:" + id, Unit: "TOKENS", Allocated: 1000})
	return id
}

// entries lists every entry of request rid (over gRPC).
func (e *env) entries(rid string) []*cyclesv1.AuditLogEntry {
	e.t.Helper()
	resp, err := e.aud.ListAuditLogs(adminCtx(newRequestID(e.t)), &cyclesv1.ListAuditLogsRequest{RequestId: rid, Limit: 200})
	if err != nil {
		e.t.Fatalf("list entries of %s: %v", rid, err)
	}
	return resp.GetLogs()
}

// reply is one HTTP answer.
type reply struct {
	status int
	body   []byte
}

func (r reply) obj(t *testing.T) map[string]any {
	t.Helper()
	return httpjson.Object(t, r.body)
}

// call sends one HTTP request with headers kv.
func (e *env) call(method, path, body string, kv ...string) reply {
	e.t.Helper()
	r := httpjson.Do(e.t, httpjson.NewRequest(e.t, method, e.base+path, body, kv...))
	return reply{status: r.Status, body: r.Body}
}

// grpcMethodDesc is grpc.MethodDesc (a service descriptor's unary methods).
type grpcMethodDesc = grpc.MethodDesc

// ledgertestZ is one deadline-index member.
func ledgertestZ(score int64, member string) redis.Z {
	return redis.Z{Score: float64(score), Member: member}
}

package cycleshttp_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/api/actionkindapi"
	"github.com/cyclesgo/cycles-go/internal/api/cycleshttp"
	"github.com/cyclesgo/cycles-go/internal/api/runtimeapi"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/httpjson"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// env is one cyclesd shell (production interceptor chain) serving the
// RuntimeService over gRPC and the Cycles HTTP wire on a real listener.
type env struct {
	t    *testing.T
	c    redis.UniversalClient
	base string
	grpc cyclesv1.RuntimeServiceClient
	// conn reaches every service over gRPC (startFull only).
	conn grpc.ClientConnInterface
	// kinds is the public ActionKindService over gRPC.
	kinds cyclesv1.ActionKindServiceClient
	// rec, when set, records every exchange (the contract test validates them).
	rec *[]exchange
}

// exchange is one recorded request and its answer.
type exchange struct {
	method, path string
	reqHeader    http.Header
	reqBody      string
	reply        reply
}

func start(t *testing.T, c redis.UniversalClient, opts ...grpctest.Option) *env {
	t.Helper()
	ex := scripttest.On(t, c)
	rt := runtimeapi.New(ledger.New(ex, ledger.Options{}))
	o := server.Options{Verifier: grpctest.Verifier{}, AdminKey: grpctest.AdminKey, RequestTimeout: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	reg, err := actionkind.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	kinds := actionkindapi.New(reg)
	srv := server.New(o, server.Services{Runtime: rt, ActionKinds: kinds})
	hs := srv.NewHTTP(server.HTTPOptions{})
	hs.Handle("/v1/", cycleshttp.New(cycleshttp.Options{Invoker: srv, Services: server.Services{Runtime: rt, ActionKinds: kinds}, MaxBodyBytes: 64 << 10}))
	base := httpjson.Serve(t, hs)
	conn := grpctest.Serve(t, srv.GRPC)
	return &env{t: t, c: c, base: base, grpc: cyclesv1.NewRuntimeServiceClient(conn),
		kinds: cyclesv1.NewActionKindServiceClient(conn)}
}

// reply is one HTTP answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// obj decodes the body as a JSON object, numbers kept exact.
func (r reply) obj(t *testing.T) map[string]any {
	t.Helper()
	return httpjson.Object(t, r.body)
}

// must is the body of an answer that has to carry status; any other fails
// the test, naming what was asked.
func (r reply) must(t *testing.T, status int, what string) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: %d %s", what, r.status, r.body)
	}
	return r.obj(t)
}

// call sends one request as tenant ("" = no key) with extra headers (k, v ...).
func (e *env) call(method, path, tenant, body string, kv ...string) reply {
	e.t.Helper()
	hdr := []string{"X-Request-Id", "req-test"}
	if tenant != "" {
		hdr = append(hdr, "X-Cycles-API-Key", grpctest.APIKey(tenant))
	}
	req := httpjson.NewRequest(e.t, method, e.base+path, body, append(hdr, kv...)...)
	r := httpjson.Do(e.t, req)
	out := reply{status: r.Status, header: r.Header, body: r.Body}
	if e.rec != nil {
		*e.rec = append(*e.rec, exchange{method: method, path: path, reqHeader: req.Header.Clone(), reqBody: body, reply: out})
	}
	return out
}

// fixture is one case's tenant.
type fixture struct {
	*env
	tenant string
}

func (e *env) fixture() *fixture { return &fixture{env: e, tenant: ledgertest.NewTenantID(e.t)} }

// funded is a fixture on the shared Redis whose tenant holds a TOKENS budget
// of allocated.
func funded(t *testing.T, allocated int64) *fixture {
	t.Helper()
	f := start(t, redistest.SharedClient(t)).fixture()
	f.budget("", ledgertest.Budget{Allocated: allocated})
	return f
}

func (f *fixture) path(rest string) string {
	return ledgertest.ScopePath(f.tenant, rest)
}

func (f *fixture) budget(rest string, b ledgertest.Budget) {
	ledgertest.SeedBudgetAt(f.t, f.c, f.tenant, rest, b)
}

func reserveBody(key string, est int64) string {
	return `{"idempotency_key":"` + key + `","subject":{"workspace":"prod"},"action":{"kind":"llm.completion","name":"m"},` +
		`"estimate":{"unit":"TOKENS","amount":` + itoa(est) + `}}`
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// reserve reserves est tokens and returns the reservation id.
func (f *fixture) reserve(key string, est int64) string {
	f.t.Helper()
	r := f.call("POST", "/v1/reservations", f.tenant, reserveBody(key, est))
	if r.status != 200 {
		f.t.Fatalf("reserve: %d %s", r.status, r.body)
	}
	return r.obj(f.t)["reservation_id"].(string)
}

// keysOf lists an object's keys, sorted.
func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// onlyKeys fails when m has a key outside allowed (the SDKs refuse those).
func onlyKeys(t *testing.T, what string, m map[string]any, allowed ...string) {
	t.Helper()
	ok := map[string]bool{}
	for _, k := range allowed {
		ok[k] = true
	}
	for _, k := range keysOf(m) {
		if !ok[k] {
			t.Errorf("%s: unexpected key %q (keys %v)", what, k, keysOf(m))
		}
	}
}

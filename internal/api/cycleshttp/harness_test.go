package cycleshttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
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
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
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
	ex, err := script.New(c)
	if err != nil {
		t.Fatal(err)
	}
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
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
	})
	conn := grpctest.Serve(t, srv.GRPC)
	return &env{t: t, c: c, base: "http://" + lis.Addr().String(), grpc: cyclesv1.NewRuntimeServiceClient(conn),
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
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, r.body)
	}
	return m
}

// call sends one request as tenant ("" = no key) with extra headers (k, v ...).
func (e *env) call(method, path, tenant, body string, kv ...string) reply {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-Request-Id", "req-test")
	if tenant != "" {
		req.Header.Set("X-Cycles-API-Key", grpctest.APIKey(tenant))
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	out := reply{status: resp.StatusCode, header: resp.Header, body: b}
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

package adminapi_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/admin"
	"github.com/cyclesgo/cycles-go/internal/api/adminapi"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/errtest"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

func client(t *testing.T) cyclesv1.AdminServiceClient {
	exec := scripttest.Shared(t)
	conn := grpctest.Start(t, server.Services{Admin: adminapi.New(admin.New(exec, admin.Options{}))})
	return cyclesv1.NewAdminServiceClient(conn)
}

func tenantID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "api-" + hex.EncodeToString(b[:])
}

func wantStatus(t *testing.T, err error, code codes.Code, reason apierr.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("code = %v, want %v (%v)", status.Code(err), code, err)
	}
	got, _, ok := apierr.FromStatus(err)
	if !ok || got != reason {
		t.Fatalf("reason = %q, want %q", got, reason)
	}
}

func TestHandlerDelegatesEveryRPC(t *testing.T) {
	c := client(t)
	ctx := grpctest.AsAdmin(context.Background())
	id := tenantID()
	root := "tenant:" + id
	tok := cyclesv1.Unit_UNIT_TOKENS

	if _, err := c.CreateTenant(ctx, &cyclesv1.CreateTenantRequest{TenantId: id}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.GetTenant(ctx, &cyclesv1.GetTenantRequest{TenantId: id}); err != nil || r.GetTenant().GetTenantId() != id {
		t.Fatalf("GetTenant = %v, %v", r, err)
	}
	name := "n"
	if _, err := c.UpdateTenant(ctx, &cyclesv1.UpdateTenantRequest{TenantId: id, Name: &name}); err != nil {
		t.Fatal(err)
	}
	k, err := c.CreateApiKey(ctx, &cyclesv1.CreateApiKeyRequest{TenantId: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RevokeApiKey(ctx, &cyclesv1.RevokeApiKeyRequest{TenantId: id, KeyId: k.GetApiKey().GetKeyId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateBudget(ctx, &cyclesv1.CreateBudgetRequest{TenantId: id, ScopePath: root, Unit: tok, Allocated: 10}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.GetBudget(ctx, &cyclesv1.GetBudgetRequest{TenantId: id, ScopePath: root, Unit: tok}); err != nil || r.GetBudget().GetRemaining() != 10 {
		t.Fatalf("GetBudget = %v, %v", r, err)
	}
	if r, err := c.ListBudgets(ctx, &cyclesv1.ListBudgetsRequest{TenantId: id}); err != nil || len(r.GetBudgets()) != 1 {
		t.Fatalf("ListBudgets = %v, %v", r, err)
	}
	if r, err := c.FundBudget(ctx, &cyclesv1.FundBudgetRequest{TenantId: id, ScopePath: root, Unit: tok,
		Operation: cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT, Amount: 5, IdempotencyKey: "k1"}); err != nil || r.GetNewRemaining() != 15 {
		t.Fatalf("FundBudget = %v, %v", r, err)
	}
	limit := int64(3)
	if _, err := c.UpdateBudget(ctx, &cyclesv1.UpdateBudgetRequest{TenantId: id, ScopePath: root, Unit: tok, OverdraftLimit: &limit}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FreezeBudget(ctx, &cyclesv1.FreezeBudgetRequest{TenantId: id, ScopePath: root, Unit: tok}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UnfreezeBudget(ctx, &cyclesv1.UnfreezeBudgetRequest{TenantId: id, ScopePath: root, Unit: tok}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CloseBudget(ctx, &cyclesv1.CloseBudgetRequest{TenantId: id, ScopePath: root, Unit: tok}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.CloseTenant(ctx, &cyclesv1.CloseTenantRequest{TenantId: id}); err != nil || r.GetTenant().GetStatus() != cyclesv1.TenantStatus_TENANT_STATUS_CLOSED {
		t.Fatalf("CloseTenant = %v, %v", r, err)
	}
}

func TestHandlerErrorsCarryTheProtocolCode(t *testing.T) {
	c := client(t)
	ctx := grpctest.AsAdmin(context.Background())
	_, err := c.GetTenant(ctx, &cyclesv1.GetTenantRequest{TenantId: tenantID()})
	wantStatus(t, err, codes.NotFound, apierr.TenantNotFound)
	_, err = c.CreateTenant(ctx, &cyclesv1.CreateTenantRequest{TenantId: "Not Valid"})
	wantStatus(t, err, codes.InvalidArgument, apierr.InvalidRequest)
	id := tenantID()
	_, err = c.FundBudget(ctx, &cyclesv1.FundBudgetRequest{TenantId: id, ScopePath: "tenant:" + id, Unit: cyclesv1.Unit_UNIT_TOKENS,
		Operation: cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT, Amount: 1, IdempotencyKey: "k"})
	wantStatus(t, err, codes.NotFound, apierr.BudgetNotFound)
}

// TestCountRefusals: the interceptor counts each domain refusal of an admin
// RPC once, by RPC and reason; a request refused by validation never reaches
// the domain and is not counted; a success counts nothing.
func TestCountRefusals(t *testing.T) {
	exec := scripttest.Shared(t)
	metrics := telemetrytest.New()
	svc := admin.New(exec, admin.Options{MeterProvider: metrics.Provider})
	conn := grpctest.Start(t, server.Services{Admin: adminapi.New(svc)},
		func(o *server.Options) { o.Inner = append(o.Inner, adminapi.CountRefusals(svc)) })
	c := cyclesv1.NewAdminServiceClient(conn)
	ctx := grpctest.AsAdmin(context.Background())
	id := tenantID()
	cases := []struct {
		name   string
		call   func() error
		rpc    string
		reason apierr.Code
		want   int64
	}{
		{"success", func() error { return errtest.ErrOf(c.CreateTenant(ctx, &cyclesv1.CreateTenantRequest{TenantId: id})) },
			"CreateTenant", apierr.DuplicateResource, 0},
		{"duplicate", func() error { return errtest.ErrOf(c.CreateTenant(ctx, &cyclesv1.CreateTenantRequest{TenantId: id})) },
			"CreateTenant", apierr.DuplicateResource, 1},
		{"unknown tenant", func() error { return errtest.ErrOf(c.GetTenant(ctx, &cyclesv1.GetTenantRequest{TenantId: tenantID()})) },
			"GetTenant", apierr.TenantNotFound, 1},
		{"invalid, refused before the domain", func() error {
			return errtest.ErrOf(c.CreateTenant(ctx, &cyclesv1.CreateTenantRequest{TenantId: "Not Valid"}))
		}, "CreateTenant", apierr.InvalidRequest, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_ = tc.call()
			if n := metrics.Sum(t, "cycles.admin.refusals", attribute.String("rpc", tc.rpc), attribute.String("reason", string(tc.reason))); n != tc.want {
				t.Fatalf("cycles.admin.refusals{rpc=%s, reason=%s} = %d, want %d", tc.rpc, tc.reason, n, tc.want)
			}
		})
	}
}

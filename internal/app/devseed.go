package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/config"
	"github.com/cyclesgo/cycles-go/internal/permission"
)

// Dev-mode demo credentials. They are fixed so the README's commands can be
// pasted as they are; dev mode listens on loopback and keeps nothing.
const (
	DevAdminKey = config.DevAdminKey
	DevTenant   = "demo"
	DevAPIKey   = "cyc_demo_00000000000000de_" + "dededededededededededededededededededededededededededededededede"
)

// devKeyPermissions are the demo key's: the default set plus the event log
// (events:read), which the README's walkthrough reads.
var devKeyPermissions = append(slices.Clone(permission.Default), "events:read")

// devBudgets are seeded in dev mode: a tenant budget and a narrower one per
// workspace and agent, so a reserve shows several scopes being charged.
var devBudgets = []struct {
	scope     string
	unit      cyclesv1.Unit
	allocated int64
}{
	{"tenant:demo", cyclesv1.Unit_UNIT_TOKENS, 1_000_000},
	{"tenant:demo/workspace:prod", cyclesv1.Unit_UNIT_TOKENS, 100_000},
	{"tenant:demo/workspace:prod/agent:bot", cyclesv1.Unit_UNIT_TOKENS, 10_000},
	{"tenant:demo", cyclesv1.Unit_UNIT_USD_MICROCENTS, 500_000_000},
}

// seedDev creates the demo tenant, key and budgets through the admin plane
// (the same scripts as production) and prints commands to try.
func seedDev(ctx context.Context, c *components, cfg *config.Config, addr string, out io.Writer) error {
	if _, err := c.admin.CreateTenant(ctx, &cyclesv1.CreateTenantRequest{TenantId: DevTenant, Name: "Demo tenant"}); err != nil {
		return fmt.Errorf("create tenant: %w", err)
	}
	if _, err := c.admin.ImportApiKey(ctx, "dev demo key", DevAPIKey, devKeyPermissions...); err != nil {
		return fmt.Errorf("create api key: %w", err)
	}
	for _, b := range devBudgets {
		if _, err := c.admin.CreateBudget(ctx, &cyclesv1.CreateBudgetRequest{
			TenantId: DevTenant, ScopePath: b.scope, Unit: b.unit, Allocated: b.allocated,
		}); err != nil {
			return fmt.Errorf("create budget %s: %w", b.scope, err)
		}
	}
	host := addr
	if strings.HasPrefix(host, "127.0.0.1:") {
		host = "localhost:" + strings.TrimPrefix(host, "127.0.0.1:")
	}
	fmt.Fprintf(out, `
================ cyclesd dev mode (embedded store, NOT durable) ================
  tenant     %s
  api key    %s
  admin key  %s
  budgets    tenant:demo 1,000,000 TOKENS; workspace:prod 100,000; agent:bot 10,000;
             tenant:demo 500,000,000 USD_MICROCENTS ($5)

Try it (grpcurl: make tools, or go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.2):

  grpcurl -plaintext %[4]s list

  grpcurl -plaintext -H '%[5]s: %[2]s' \
    -d '{"idempotency_key":"try-1","subject":{"workspace":"prod","agent":"bot"},"action":{"kind":"llm.completion","name":"gpt-4o-mini"},"estimate":{"unit":"UNIT_TOKENS","amount":"500"}}' \
    %[4]s cycles.v1.RuntimeService/CreateReservation

  grpcurl -plaintext -H '%[5]s: %[2]s' -d '{"workspace":"prod"}' %[4]s cycles.v1.RuntimeService/GetBalances

  grpcurl -plaintext -H '%[6]s: %[3]s' -d '{"tenant_id":"demo","scope_path":"tenant:demo","unit":"UNIT_TOKENS"}' \
    %[4]s cycles.v1.AdminService/GetBudget

%[7]sThe README walks through a full reserve -> commit session; docs/http-api.md
does the same with curl.
================================================================================
`, DevTenant, DevAPIKey, cfg.AdminKey, host, auth.APIKeyHeader, auth.AdminKeyHeader, httpTry(cfg.HTTPListen, DevAPIKey))
	return nil
}

// httpTry is the banner's curl example on the Cycles HTTP wire (empty when the
// HTTP listener is off).
func httpTry(addr, key string) string {
	if addr == "" {
		return ""
	}
	if strings.HasPrefix(addr, "127.0.0.1:") {
		addr = "localhost:" + strings.TrimPrefix(addr, "127.0.0.1:")
	}
	return fmt.Sprintf(`Or over HTTP/JSON (the Cycles wire, for the Cycles SDKs):

  curl -s -H 'X-Cycles-API-Key: %[2]s' 'http://%[1]s/v1/balances?workspace=prod'

  curl -s -H 'X-Cycles-API-Key: %[2]s' -H 'Content-Type: application/json' http://%[1]s/v1/reservations \
    -d '{"idempotency_key":"try-http-1","subject":{"workspace":"prod","agent":"bot"},"action":{"kind":"llm.completion","name":"gpt-4o-mini"},"estimate":{"unit":"TOKENS","amount":500}}'

`, addr, key)
}

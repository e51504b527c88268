package main

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc/metadata"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/permission"
)

func (b *runner) adminCtx(ctx context.Context) context.Context {
	return metadata.NewOutgoingContext(ctx, metadata.Pairs(auth.AdminKeyHeader, b.cfg.adminKey))
}

// provisionTenant creates a tenant and one API key; returns the key secret.
func (b *runner) provisionTenant(ctx context.Context, tenant string) (string, error) {
	actx := b.adminCtx(ctx)
	if _, err := b.admin.CreateTenant(actx, &cyclesv1.CreateTenantRequest{TenantId: tenant, Name: "cycles-bench " + tenant}); err != nil {
		return "", fmt.Errorf("create tenant %s: %w", tenant, err)
	}
	key, err := b.admin.CreateApiKey(actx, &cyclesv1.CreateApiKeyRequest{TenantId: tenant, Name: "bench", Permissions: append(slices.Clone(permission.Default), "events:read")})
	if err != nil {
		return "", fmt.Errorf("create api key for %s: %w", tenant, err)
	}
	return key.GetSecret(), nil
}

// createBudgets creates a TOKENS budget of `allocated` at each path, a few
// at a time.
func (b *runner) createBudgets(ctx context.Context, tenant string, paths []string) error {
	actx := b.adminCtx(ctx)
	sem := make(chan struct{}, 8)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, p := range paths {
		wg.Add(1)
		sem <- struct{}{}
		go func(p string) {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := b.admin.CreateBudget(actx, &cyclesv1.CreateBudgetRequest{
				TenantId: tenant, ScopePath: p, Unit: cyclesv1.Unit_UNIT_TOKENS, Allocated: b.cfg.allocated,
			})
			if err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("create budget %s: %w", p, err)
				}
				mu.Unlock()
			}
		}(p)
	}
	wg.Wait()
	return first
}

func (b *runner) getBudget(ctx context.Context, tenant, path string) (*cyclesv1.Budget, error) {
	res, err := b.admin.GetBudget(b.adminCtx(ctx), &cyclesv1.GetBudgetRequest{TenantId: tenant, ScopePath: path, Unit: cyclesv1.Unit_UNIT_TOKENS})
	if err != nil {
		return nil, err
	}
	return res.GetBudget(), nil
}

// ensurePolicy creates (or updates) the rate-limit policy of the check phase.
func (b *runner) ensurePolicy(ctx context.Context, p *cyclesv1.Policy) error {
	actx := b.adminCtx(ctx)
	rl := cyclesv1.NewRateLimitServiceClient(b.adminConn)
	_, err := rl.CreatePolicy(actx, &cyclesv1.CreatePolicyRequest{Policy: p})
	if reason, _, ok := apierr.FromStatus(err); ok && reason == apierr.DuplicateResource {
		_, err = rl.UpdatePolicy(actx, &cyclesv1.UpdatePolicyRequest{Policy: p})
	}
	if err != nil {
		return fmt.Errorf("rate-limit policy %s: %w", p.GetName(), err)
	}
	return nil
}

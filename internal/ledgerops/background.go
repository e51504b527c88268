package ledgerops

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

// RunAuditor audits every registered tenant, one at a time at most
// Options.AuditRate tenants per second, then waits Options.AuditInterval and
// starts again, until ctx ends. After each full pass it sets
// cycles.audit.discrepancies{kind} (exported as cycles_audit_discrepancies)
// to that pass's totals, zero for the kinds it did not find, so an alert on
// the gauge clears once the ledger is repaired. With no interval it returns at once.
func (s *Service) RunAuditor(ctx context.Context) error {
	if s.opts.AuditInterval <= 0 {
		return nil
	}
	s.log.Info("background ledger auditor started", zap.Duration("interval", s.opts.AuditInterval),
		zap.Float64("tenants_per_second", s.opts.AuditRate))
	for {
		if _, err := s.AuditAll(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("background audit failed (retried next interval)", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.opts.AuditInterval):
		}
	}
}

// AuditAll runs one background pass over every tenant and records the gauge;
// it returns the totals per kind. A tenant whose audit fails is logged and
// skipped (the pass goes on; the gauge is still set from the others).
func (s *Service) AuditAll(ctx context.Context) (map[string]int64, error) {
	totals := map[string]int64{}
	gap := time.Duration(float64(time.Second) / s.opts.AuditRate)
	var last time.Time
	err := s.walkTenants(ctx, "", func(tenant string) bool {
		if wait := gap - time.Since(last); !last.IsZero() && wait > 0 {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(wait):
			}
		}
		last = time.Now()
		actx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		r, err := s.audit(actx, tenant)
		cancel()
		if err != nil {
			s.log.Warn("audit of tenant failed", zap.String("tenant", tenant), zap.Error(err))
			return ctx.Err() == nil
		}
		for _, d := range r.found {
			totals[d.GetKind()]++
		}
		if len(r.found) > 0 {
			s.log.Warn("ledger audit found discrepancies (see OpsService.AuditTenant)",
				zap.String("tenant", tenant), zap.Int("discrepancies", len(r.found)))
		}
		return true
	})
	if err != nil {
		return totals, err
	}
	if ctx.Err() != nil {
		return totals, ctx.Err()
	}
	for _, k := range Kinds {
		s.discrepancies.Record(ctx, totals[k], metric.WithAttributes(attribute.String("kind", k)))
	}
	return totals, nil
}

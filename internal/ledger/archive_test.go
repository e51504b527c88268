package ledger_test

import (
	"testing"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/test/errtest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// TestSettleQueuesForArchive: with an archive configured, the script that
// settles a reservation (commit, release, the tenant-close cascade) queues
// its id on the tenant's archive queue and leaves the record without a TTL
// (the archiver sets it once PostgreSQL holds the record); without one, the
// record gets today's terminal retention and nothing is queued.
func TestSettleQueuesForArchive(t *testing.T) {
	settles := []struct {
		name   string
		settle func(e *env, rid string) error
	}{
		{"commit", func(e *env, rid string) error { return errtest.ErrOf(e.commit(rid, "c-"+rid, 40)) }},
		{"release", func(e *env, rid string) error { return errtest.ErrOf(e.release(rid, "r-"+rid)) }},
		{"tenant close", func(e *env, _ string) error {
			ledgertest.SetTenantStatus(e.t, e.c, e.tenant, "CLOSED")
			_, _, err := e.l.ReleaseForTenantClose(ctx, e.tenant, 10)
			return err
		}},
	}
	for _, s := range settles {
		for _, archive := range []bool{false, true} {
			name := s.name + "/no archive"
			if archive {
				name = s.name + "/archive"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t)
				e.l = ledger.New(e.exec, ledger.Options{MeterProvider: e.m.Provider, Archive: archive})
				ledgertest.SeedTenant(t, e.c, e.tenant, ledgertest.Tenant{})
				e.budget(ledgertest.Budget{Scope: e.scope(""), Allocated: 1000})
				rid := e.mustReserve("k", 100).ReservationId
				tk := keys.Tenant(e.tenant)
				if ttl := e.c.PTTL(ctx, tk.Reservation(rid)).Val(); ttl != -1 {
					t.Fatalf("an ACTIVE record has PTTL %v", ttl)
				}
				if err := s.settle(e, rid); err != nil {
					t.Fatal(err)
				}
				ttl := e.c.PTTL(ctx, tk.Reservation(rid)).Val()
				queue, err := e.c.XRange(ctx, tk.ArchiveQueue(), "-", "+").Result()
				if err != nil {
					t.Fatal(err)
				}
				if !archive {
					if ttl <= 0 || len(queue) != 0 {
						t.Fatalf("without an archive: PTTL %v, queue %v", ttl, queue)
					}
					return
				}
				if ttl != -1 {
					t.Fatalf("with an archive the settled record has PTTL %v, want none until archived", ttl)
				}
				if len(queue) != 1 || queue[0].Values["id"] != rid {
					t.Fatalf("archive queue %v, want one entry for %s", queue, rid)
				}
			})
		}
	}
}

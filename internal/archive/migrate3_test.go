package archive

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cyclesgo/cycles-go/test/pgtest"
)

// TestMigrateCompactRows: rows written at schema version 2 (null
// reservation_id for canonical ids, the policy as text, the action JSON)
// read back the same after migration 3; a policy the codes do not know
// stops the migration (and leaves the database at version 2).
func TestMigrateCompactRows(t *testing.T) {
	ctx := context.Background()
	canonical := "r_acme_0123456789abcdef0123456789abcdef"
	cases := []struct {
		name    string
		policy  string
		wantErr bool
	}{
		{"known policy", "ALLOW_WITH_OVERDRAFT", false},
		{"no policy", "", false},
		{"unknown policy", "SOMETIMES", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dsn := pgtest.SharedDatabase(t)
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			ms, err := migrations()
			if err != nil || len(ms) < 3 {
				t.Fatalf("migrations %d: %v", len(ms), err)
			}
			if _, err := conn.Exec(ctx, `CREATE TABLE cycles_schema_versions (version integer PRIMARY KEY,
				name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
				t.Fatal(err)
			}
			for _, m := range ms[:2] {
				if _, err := migrateOne(ctx, conn, m, len(ms)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := conn.Exec(ctx, `CREATE TABLE cycles_reservations_p20261125 PARTITION OF cycles_reservations
				FOR VALUES FROM ('2026-11-25') TO ('2026-11-26')`); err != nil {
				t.Fatal(err)
			}
			key, _ := encodeID("acme", canonical)
			other := md5Key("other-id")
			if _, err := conn.Exec(ctx, `INSERT INTO cycles_reservations (settled_at, estimate, charged, created_at_ms,
				expires_at_ms, grace_ms, ext_count, max_ext, state, rid, tenant_id, reservation_id, unit, scope_path,
				policy, idem_key, action, replay) VALUES
				($1, 100, 40, 1, 2, 5000, 1, 10, 1, $2, 'acme', NULL, 'TOKENS', 'tenant:acme', $4, 'k1',
				 '{"kind":"llm","name":"m"}', $5),
				($1, 7, NULL, 1, 2, 0, 0, 0, 2, $3, 'acme', 'other-id', 'TOKENS', 'tenant:acme', $4, 'k2', '', NULL)`,
				day0, key, other, tc.policy, []byte("\x03cb1\x011")); err != nil {
				t.Fatal(err)
			}
			_, err = Migrate(ctx, conn)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "migration 3") {
					t.Fatalf("migration of an unknown policy: %v", err)
				}
				if v, _ := SchemaVersion(ctx, conn); v != 2 {
					t.Fatalf("schema version %d after a failed migration 3, want 2", v)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got, ok, err := s.GetReservation(ctx, "acme", canonical)
			if err != nil || !ok || got.ReservationID != canonical || got.Policy != tc.policy ||
				got.Action != `{"kind":"llm","name":"m"}` || got.ActionKind != "" || got.GraceMs != 5000 ||
				got.ExtCount != 1 || got.MaxExt != 10 || string(got.Replay) != "\x03cb1\x011" {
				t.Fatalf("canonical row after migration: %+v %v %v", got, ok, err)
			}
			// Equal creation times: ids in bytewise order, as Redis orders them.
			list, err := s.ListReservations(ctx, ReservationQuery{Tenant: "acme", Limit: 10})
			if err != nil || len(list) != 2 || list[0].ReservationID != "other-id" || list[1].ReservationID != canonical {
				t.Fatalf("listing after migration: %+v %v", list, err)
			}
		})
	}
}

func md5Key(id string) [16]byte {
	k, _ := encodeID("acme", id)
	return k
}

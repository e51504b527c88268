package ledger_test

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/idempotency"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// hashPair is a payload hash as internal/idempotency makes it now (22 characters)
// and the 64-hex form stored for the same payload before hashes were
// shortened (its first 32 hex digits are the same 16 bytes).
func hashPair(t *testing.T, seed string) (short, legacy string) {
	t.Helper()
	raw := []byte(strings.Repeat(seed, 16))[:16]
	short = base64.RawURLEncoding.EncodeToString(raw)
	if len(short) != idempotency.HashLen {
		t.Fatalf("test hash %q has length %d", short, len(short))
	}
	return short, hex.EncodeToString(raw) + "0123456789abcdef0123456789abcdef"
}

// legacyDryAnswer is a dry run's answer as records written before the flat
// replies kept it: the snapshot as a JSON object (dry and is_over_limit as
// booleans), from the fields of a fresh answer o.
func legacyDryAnswer(t *testing.T, o *out) string {
	t.Helper()
	snap := map[string]any{}
	for k, v := range o.Snap {
		snap[k] = v
	}
	snap["dry"] = true
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func legacyJSON(t *testing.T, v map[string]string) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Idempotency records written before the compact format (JSON with a 64-hex
// payload hash; commit/release hashes of 64 hex in the record) still replay
// byte for byte under today's hashes, and still refuse another payload
// (lua/lib/idem.lua); a record of neither format is INTERNAL_ERROR.
func TestScriptIdempotencyLegacyRecords(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		s.budget(ledgertest.Budget{Scope: "", Allocated: 100000})
		s.budget(ledgertest.Budget{Scope: "workspace:prod", Allocated: 100000})
		h, old := hashPair(t, "a")
		other, _ := hashPair(t, "b")

		// Live reserve: {"h","rid"}.
		rid := "r_" + s.tenant + "_" + strings.ReplaceAll(uuid.NewString(), "-", "")
		first, err := s.reserve(rc{Key: "lk", Hash: h, RID: rid, Est: "10"})
		if err != nil {
			t.Fatal(err)
		}
		raw := s.c.Get(ctx, s.tk.Idempotency("reserve", "lk")).Val()
		if want := "p" + h + ":" + strings.TrimPrefix(rid, "r_"+s.tenant+"_"); raw != want {
			t.Fatalf("compact record = %q, want %q", raw, want)
		}
		s.c.Set(ctx, s.tk.Idempotency("reserve", "lk"), legacyJSON(t, map[string]string{"h": old, "rid": rid}), 0)
		again, err := s.reserve(rc{Key: "lk", Hash: h, RID: rid, Est: "10"})
		if err != nil || !again.Replay || again.Resp != first.Resp {
			t.Fatalf("legacy live replay = %+v, %v (first %+v)", again, err, first)
		}
		_, err = s.reserve(rc{Key: "lk", Hash: other, Est: "10"})
		wantCode(t, err, apierr.IdempotencyMismatch)

		// Dry run: {"h","resp"}.
		d1, err := s.reserve(rc{Key: "dk", Hash: h, Mode: "dry", Est: "10"})
		if err != nil {
			t.Fatal(err)
		}
		s.c.Set(ctx, s.tk.Idempotency("reserve", "dk"), legacyJSON(t, map[string]string{"h": old, "resp": legacyDryAnswer(t, d1)}), 0)
		d2, err := s.reserve(rc{Key: "dk", Hash: h, Mode: "dry", Est: "10"})
		if err != nil || !d2.Replay || d2.Resp != d1.Resp {
			t.Fatalf("legacy dry replay = %+v, %v", d2, err)
		}
		_, err = s.reserve(rc{Key: "dk", Hash: other, Mode: "dry", Est: "10"})
		wantCode(t, err, apierr.IdempotencyMismatch)

		// Event: {"h","id"}.
		e1, err := s.event(ec{Key: "ek", Hash: h, Actual: "3"})
		if err != nil {
			t.Fatal(err)
		}
		cur := s.c.Get(ctx, s.tk.Idempotency("event", "ek")).Val()
		eid := cur[strings.IndexByte(cur, ':')+1:]
		s.c.Set(ctx, s.tk.Idempotency("event", "ek"), legacyJSON(t, map[string]string{"h": old, "id": eid}), 0)
		e2, err := s.event(ec{Key: "ek", Hash: h, Actual: "3"})
		if err != nil || !e2.Replay || e2.Resp != e1.Resp {
			t.Fatalf("legacy event replay = %+v, %v", e2, err)
		}
		_, err = s.event(ec{Key: "ek", Hash: other, Actual: "3"})
		wantCode(t, err, apierr.IdempotencyMismatch)

		// Commit and release: the hash kept in the reservation record.
		settle := func(name, field string, args func(rid, hash string) []any, ks func(rid string) []string) {
			t.Helper()
			id := s.mustReserve(rc{Est: "5"})
			o1, err := s.run(name, ks(id), args(id, h)...)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			s.c.HSet(ctx, s.tk.Reservation(id), field, old)
			o2, err := s.run(name, ks(id), args(id, h)...)
			if err != nil || !o2.Replay || o2.Resp != o1.Resp {
				t.Fatalf("legacy %s replay = %+v, %v", name, o2, err)
			}
			_, err = s.run(name, ks(id), args(id, other)...)
			wantCode(t, err, apierr.IdempotencyMismatch)
		}
		settle("ledger/commit", "commit_hash",
			func(id, hash string) []any { return []any{id, "TOKENS", "4", "ck", hash, "", "", testEventCtx} },
			func(id string) []string {
				return []string{s.tk.Prefix(), s.tk.Record(), s.tk.Reservation(id), s.tk.Deadlines(), s.tk.Events()}
			})
		settle("ledger/release", "release_hash",
			func(id, hash string) []any { return []any{id, "rk", hash, "done"} },
			func(id string) []string {
				return []string{s.tk.Prefix(), s.tk.Record(), s.tk.Reservation(id), s.tk.Deadlines()}
			})

		// Neither format: INTERNAL_ERROR, for old and new shapes alike.
		for i, bad := range []string{"{not json", `{"h":5}`, `{"h":"` + old + `"}`, "zjunk"} {
			key := "bad" + string(rune('0'+i))
			s.c.Set(ctx, s.tk.Idempotency("decide", key), bad, 0)
			ks := []string{s.tk.Prefix(), s.tk.Record(), s.tk.Budgets(), s.tk.Idempotency("decide", key), s.tk.Events(),
				s.tk.Budget(s.path(""), "TOKENS"), s.tk.Budget(s.path("workspace:prod"), "TOKENS")}
			paths, aff := s.affected(nil)
			_, err := s.run("ledger/decide", ks, "TOKENS", "1", key, h, paths[len(paths)-1], aff, `{}`, `{}`, testEventCtx)
			wantCode(t, err, apierr.InternalError)
		}
	})
}

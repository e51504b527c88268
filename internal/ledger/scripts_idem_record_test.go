package ledger_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/idempotency"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// testHash is a payload hash of the form internal/idempotency makes (22
// characters of base64url).
func testHash(t *testing.T, seed string) string {
	t.Helper()
	h := base64.RawURLEncoding.EncodeToString([]byte(strings.Repeat(seed, 16))[:16])
	if len(h) != idempotency.HashLen {
		t.Fatalf("test hash %q has length %d", h, len(h))
	}
	return h
}

// An idempotency record has one layout (lua/lib/idem.lua,
// docs/design.md#idempotency-records): a live reserve keeps "p<hash>:<id
// without its tenant prefix>". Anything else under the key — another
// layout, a truncated or foreign value — is refused as INTERNAL_ERROR: never
// replayed, never taken for a fresh key, and left as it was.
func TestScriptIdempotencyRecordLayout(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		s.budget(ledgertest.Budget{Scope: "", Allocated: 100000})
		s.budget(ledgertest.Budget{Scope: "workspace:prod", Allocated: 100000})
		h := testHash(t, "a")

		rid := "r_" + s.tenant + "_" + strings.ReplaceAll(uuid.NewString(), "-", "")
		first, err := s.reserve(rc{Key: "lk", Hash: h, RID: rid, Est: "10"})
		if err != nil {
			t.Fatal(err)
		}
		raw := s.c.Get(ctx, s.tk.Idempotency("reserve", "lk")).Val()
		if want := "p" + h + ":" + strings.TrimPrefix(rid, "r_"+s.tenant+"_"); raw != want {
			t.Fatalf("record = %q, want %q", raw, want)
		}
		again, err := s.reserve(rc{Key: "lk", Hash: h, RID: rid, Est: "10"})
		if err != nil || !again.Replay || again.Resp != first.Resp {
			t.Fatalf("replay = %+v, %v (first %+v)", again, err, first)
		}

		for i, bad := range []string{
			`{"h":"` + strings.Repeat("ab", 32) + `","rid":"` + rid + `"}`, // a JSON object
			"{not json", "zjunk",
		} {
			key := "bad" + string(rune('0'+i))
			s.c.Set(ctx, s.tk.Idempotency("decide", key), bad, 0)
			_, err := s.decideWith("1", key, h)
			wantCode(t, err, apierr.InternalError)
			if got := s.c.Get(ctx, s.tk.Idempotency("decide", key)).Val(); got != bad {
				t.Fatalf("refused record %q was rewritten as %q", bad, got)
			}
		}
	})
}

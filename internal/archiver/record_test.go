package archiver

import (
	"maps"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/internal/archive"
)

// TestRowOfIsLossless: every record, ordinary or odd, comes back from its
// archive row field for field (so reads and replays past the hot window can
// render from the very hash Redis held), and the ordinary fields land in
// their columns.
func TestRowOfIsLossless(t *testing.T) {
	at := time.UnixMilli(1_790_000_000_000).UTC()
	committed := map[string]string{
		"state": "COMMITTED", "unit": "TOKENS", "estimate": "100", "scope_path": "tenant:acme/workspace:prod",
		"budgeted": "12", "created_at": "1789999990000", "expires_at": "1790000050000", "grace_ms": "5000",
		"policy": "REJECT", "max_ext": "10", "idem_key": "k-1", "action": `{"kind":"llm"}`, "rb1": "900,100,0,1000",
		"charged": "40", "finalized_at": "1790000000123", "commit_key": "c-1", "commit_hash": "abc",
		"cb1": "960,0,40,1000", "committed_metadata": `{"a":1}`,
	}
	cases := []struct {
		name   string
		record map[string]string
		check  func(t *testing.T, r archive.Reservation)
	}{
		{"committed", committed, func(t *testing.T, r archive.Reservation) {
			if r.State != archive.StateCommitted || r.Estimate != 100 || r.Charged == nil || *r.Charged != 40 ||
				r.DebtIncurred != 0 || r.ScopePath != "tenant:acme/workspace:prod" || r.CreatedAtMs != 1789999990000 ||
				!r.SettledAt.Equal(time.UnixMilli(1790000000123)) || r.IdemKey != "k-1" || r.MaxExt != 10 {
				t.Fatalf("columns %+v", r)
			}
		}},
		{"released with debt and extensions", map[string]string{
			"state": "RELEASED", "unit": "USD_MICROCENTS", "estimate": "7", "scope_path": "tenant:a", "budgeted": "1",
			"created_at": "1", "expires_at": "2", "grace_ms": "0", "policy": "ALLOW_WITH_OVERDRAFT", "max_ext": "0",
			"ext_count": "2", "debt_incurred": "5", "finalized_at": "3", "release_key": "r", "release_hash": "h",
			"release_reason": "done", "lb1": "1,0,0,1",
		}, func(t *testing.T, r archive.Reservation) {
			if r.ExtCount != 2 || r.DebtIncurred != 5 || r.Charged != nil || r.State != archive.StateReleased {
				t.Fatalf("columns %+v", r)
			}
		}},
		{"expired", map[string]string{
			"state": "EXPIRED", "unit": "TOKENS", "estimate": "9", "scope_path": "tenant:a", "budgeted": "1",
			"created_at": "1", "expires_at": "2", "grace_ms": "3", "policy": "REJECT", "max_ext": "1",
			"expired_at": "1790000000999",
		}, func(t *testing.T, r archive.Reservation) {
			if !r.SettledAt.Equal(time.UnixMilli(1790000000999)) || r.State != archive.StateExpired {
				t.Fatalf("columns %+v", r)
			}
		}},
		{"odd values stay as they were", map[string]string{
			"state": "COMMITTED", "estimate": "0100", "debt_incurred": "0", "ext_count": "0", "unit": "",
			"idem_key": "bad\xffutf8\x00", "charged": "-0", "finalized_at": "x", "metadata": "",
			"max_ext": "99999999999", "grace_ms": "9223372036854775807", "policy": "SOMETIMES",
			"action": `{"kind":"a\"b","name":"c"}`, "cb1": "1,01,2", "rb1": "-0", "lb1": "9223372036854775808",
			"commit_hash": "Vh2N57uqJphp_oFtN-95-w=", "release_hash": "a+b", "": "empty name",
			"a field name longer than one hundred and twenty-seven bytes, so its length takes two uvarint bytes: " +
				"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx": "v",
		}, func(t *testing.T, r archive.Reservation) {
			if !r.SettledAt.Equal(at) || r.IdemKey != "" || r.Charged != nil || r.GraceMs != 0 || r.MaxExt != 0 ||
				r.Policy != "" || r.Action != `{"kind":"a\"b","name":"c"}` || r.ActionKind != "" {
				t.Fatalf("columns %+v", r)
			}
		}},
		{"compact forms: split action, balance rows, hashes", map[string]string{
			"state": "COMMITTED", "unit": "USD_MICROCENTS", "estimate": "10000", "policy": "ALLOW_IF_AVAILABLE",
			"created_at": "1789999990000", "expires_at": "1790000050000", "grace_ms": "5000", "max_ext": "10",
			"action": `{"kind":"llm.completion","name":"gpt-4o <mini>"}`, "finalized_at": "1790000000123",
			"rb1": "1099511617776,10000,0,1099511627776", "cb1": "-5,0,9000,1099511627776,-9223372036854775808",
			"commit_hash": "Vh2N57uqJphp_oFtN-95-w", "commit_key": "bench-commit-0001", "metrics": `{"tokens":3}`,
		}, func(t *testing.T, r archive.Reservation) {
			if r.ActionKind != "llm.completion" || r.ActionName != "gpt-4o <mini>" || r.Action != "" ||
				r.Policy != "ALLOW_IF_AVAILABLE" {
				t.Fatalf("columns %+v", r)
			}
			// 1 marker + rb1 (1 tag, 1 count, zigzag varints 6+3+1+6) + cb1
			// (1, 1, 1+1+3+6+10) + commit_hash (1, 1, 16 bytes) + commit_key
			// (1, 1, 17) + metrics (1, 1, 12); version 1 took 162 B.
			if len(r.Replay) != 1+18+23+18+19+14 {
				t.Fatalf("replay bytes %d: %x", len(r.Replay), r.Replay)
			}
		}},
		{"always-written fields absent", map[string]string{"state": "RELEASED"}, func(t *testing.T, r archive.Reservation) {
			if !r.SettledAt.Equal(at) {
				t.Fatalf("settled at %v, want the archive time", r.SettledAt)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := RowOf("acme", "r_acme_00", c.record, at)
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, r)
			back, err := RecordOf(r)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(back, c.record) {
				t.Fatalf("round trip\n got %q\nwant %q", back, c.record)
			}
		})
	}
	for _, st := range []string{"ACTIVE", "", "committed"} {
		if _, err := RowOf("acme", "r", map[string]string{"state": st}, at); err == nil {
			t.Fatalf("state %q archived", st)
		}
	}
	for _, bad := range [][]byte{{0x05, 'a'}, {0x00, 0x42}, {0x00, 0x42, 0x02, 0x80}, {0x00, 0x3f, 0x00}, {0x00, 0xc2, 0x00}} {
		if _, err := RecordOf(archive.Reservation{State: archive.StateCommitted, Replay: bad}); err == nil {
			t.Fatalf("bad replay bytes %x decoded", bad)
		}
	}
	// Rows written before the compact form (version 1: (uvarint length,
	// bytes) pairs in key order) still decode.
	v1 := []byte("\x03cb1\x0d960,0,40,1000\x0bcommit_hash\x03abc")
	f, err := RecordOf(archive.Reservation{State: archive.StateCommitted, Replay: v1})
	if err != nil || f["cb1"] != "960,0,40,1000" || f["commit_hash"] != "abc" {
		t.Fatalf("version 1 replay bytes: %q, %v", f, err)
	}
}

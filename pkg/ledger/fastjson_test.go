package ledger

import (
	"encoding/json"
	"reflect"
	"testing"
)

// Real script answers (cjson output: escaped slashes, any key order, "{}"
// for empty tables) and the edge cases encoding/json has an opinion on.
var resultCorpus = []string{
	`{"replay":false,"rem_ttl":"3600000","resp":"{\"affected\":[\"tenant:t\",\"tenant:t\\\/workspace:bench\"],\"reserved\":\"1000\",\"policy\":\"ALLOW_IF_AVAILABLE\",\"expires_at_ms\":\"1795442849614\",\"unit\":\"TOKENS\",\"balances\":[{\"is_over_limit\":false,\"remaining\":\"999999999000\",\"reserved\":\"1000\",\"overdraft_limit\":\"0\",\"spent\":\"0\",\"allocated\":\"1000000000000\",\"scope_path\":\"tenant:t\",\"debt\":\"0\"}],\"scope_path\":\"tenant:t\\\/workspace:bench\",\"decision\":\"ALLOW\",\"reservation_id\":\"6f1c\",\"grace_ms\":\"5000\"}"}`,
	`{"replay":true,"resp":"{\"dry\":true,\"decision\":\"DENY\",\"reason_code\":\"BUDGET_EXCEEDED\",\"affected\":{}}","denied":"BUDGET_EXCEEDED"}`,
	`{"replay":false,"overage":"120","debt":"71000","resp":"{\"status\":\"COMMITTED\",\"unit\":\"USD_MICROCENTS\",\"charged\":\"9223372036854775807\",\"released\":\"0\",\"balances\":{},\"debt_incurred\":\"-5\"}"}`,
	`{"resp":"{\"status\":\"APPLIED\",\"event_id\":\"evt_1\",\"extension_count\":3,\"caps\":\"{\\\"max_tokens\\\":5}\",\"balances\":[]}"}`,
	`{"replay":false,"rem_ttl":null,"resp":"{\"reserved\":null,\"affected\":null,\"balances\":[null,{\"unit\":\"TOKENS\",\"remaining\":-3}]}"}`,
	` { "replay" : false , "resp" : "{ }" } `,
	`{"resp":"{\"affected\":{ }}"}`,       // not cjson's "{}": encoding/json refuses
	`{"resp":"{\"affected\":[]}"}`,        // empty, non-nil
	`{"resp":"{\"Decision\":\"ALLOW\"}"}`, // case-insensitive match
	`{"Replay":true,"resp":"{}"}`,         // case-insensitive match
	`{"resp":"{\"extra\":{\"a\":[1,2,{\"b\":null}],\"c\":true},\"decision\":\"ALLOW\"}"}`,
	`{"resp":"{\"decision\":\"caf\u00e9\"}"}`,            // \u escape
	`{"resp":"{\"decision\":\"café\"}"}`,                 // non-ASCII
	`{"resp":"{\"reserved\":\"1e3\"}"}`,                  // not an integer
	`{"resp":"{\"reserved\":1.5}"}`,                      // not an integer
	`{"resp":"{\"reserved\":\"99999999999999999999\"}"}`, // overflow
	`{"resp":"{\"reserved\":\"\"}"}`,                     // empty string = 0
	`{"resp":"{\"reserved\":\" 5\"}"}`,                   // spaces are not digits
	`{"resp":"{\"grace_ms\":01}"}`,                       // invalid JSON number
	`{"resp":"{\"dry\":\"true\"}"}`,                      // wrong type
	`{"resp":"{\"decision\":5}"}`,                        // wrong type
	`{"resp":"{\"balances\":[{\"remaining\":\"1\"},]}"}`, // trailing comma
	`{"resp":"{}"} trailing`,
	`{"resp":"{}",}`,
	`{"resp":"{\"decision\":\"A\",\"decision\":\"B\"}"}`, // duplicate: last wins
	`{"resp":"{\"unit\":\"a\\tb\\nc\\\\d\\\"e\\\/f\\bg\\fh\\ri\"}"}`,
	`[]`,
	`null`,
	``,
	`{"resp":"{\"balances\":[{\"is_over_limit\":true,\"IS_OVER_LIMIT\":false}]}"}`,
}

// decodeBoth decodes raw with the fast decoder (falling back as
// decodeResult does) and with encoding/json alone.
func decodeBoth(raw []byte) (fastR, slowR result, fastS, slowS snapshot, fastErr, slowErr [2]error) {
	fastErr[0] = decodeInto(raw, &fastR, fastResult)
	slowErr[0] = json.Unmarshal(raw, &slowR)
	if fastErr[0] == nil && slowErr[0] == nil {
		fastErr[1] = decodeInto([]byte(fastR.Resp), &fastS, fastSnapshot)
		slowErr[1] = json.Unmarshal([]byte(slowR.Resp), &slowS)
	}
	return
}

func checkSame(t *testing.T, raw string) {
	t.Helper()
	fr, sr, fs, ss, fe, se := decodeBoth([]byte(raw))
	for i := range fe {
		if (fe[i] == nil) != (se[i] == nil) {
			t.Fatalf("%q: error mismatch at level %d: fast %v, encoding/json %v", raw, i, fe[i], se[i])
		}
	}
	if !reflect.DeepEqual(fr, sr) {
		t.Fatalf("%q: result\n fast %+v\n json %+v", raw, fr, sr)
	}
	if !reflect.DeepEqual(fs, ss) {
		t.Fatalf("%q: snapshot\n fast %+v\n json %+v", raw, fs, ss)
	}
	// decodeResult itself (which skips the Resp string) agrees too.
	r, s, err := decodeResult(scriptReserve, []byte(raw))
	if (err == nil) != (fe[0] == nil && fe[1] == nil) {
		t.Fatalf("%q: decodeResult error %v, want errors %v", raw, err, se)
	}
	if err == nil {
		sr.Resp, r.Resp = "", ""
		if !reflect.DeepEqual(*r, sr) || !reflect.DeepEqual(*s, ss) {
			t.Fatalf("%q: decodeResult\n %+v %+v\n json %+v %+v", raw, *r, *s, sr, ss)
		}
	}
}

func TestFastDecodeMatchesEncodingJSON(t *testing.T) {
	for _, raw := range resultCorpus {
		checkSame(t, raw)
	}
}

// The fast path really is taken for what the scripts produce (the test
// would pass trivially if it always fell back).
func TestFastDecodeHandlesScriptOutput(t *testing.T) {
	for _, raw := range resultCorpus[:6] {
		var r result
		if err := fastResult([]byte(raw), &r); err != nil {
			t.Fatalf("%q: fast path declined: %v", raw, err)
		}
		var s snapshot
		if err := fastSnapshot([]byte(r.Resp), &s); err != nil {
			t.Fatalf("%q: fast path declined the snapshot: %v", r.Resp, err)
		}
	}
}

func FuzzFastDecode(f *testing.F) {
	for _, raw := range resultCorpus {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		checkSame(t, raw)
		// The snapshot decoder on its own input too.
		var a, b snapshot
		ea := decodeInto([]byte(raw), &a, fastSnapshot)
		eb := json.Unmarshal([]byte(raw), &b)
		if (ea == nil) != (eb == nil) || !reflect.DeepEqual(a, b) {
			t.Fatalf("%q: snapshot fast %+v (%v) json %+v (%v)", raw, a, ea, b, eb)
		}
	})
}

func BenchmarkDecodeResult(b *testing.B) {
	raw := []byte(resultCorpus[0])
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, _, err := decodeResult(scriptReserve, raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var r result
			var s snapshot
			if err := json.Unmarshal(raw, &r); err != nil {
				b.Fatal(err)
			}
			if err := json.Unmarshal([]byte(r.Resp), &s); err != nil {
				b.Fatal(err)
			}
		}
	})
}

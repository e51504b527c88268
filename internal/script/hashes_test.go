package script

import (
	"context"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// TestReadHashes: each key's fields come back byte for byte, in the keys'
// order, an absent key as an empty map; a key of another type fails the
// whole read (as HGETALL in a script did) instead of passing as absent.
func TestReadHashes(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			ex := probeExec(t, be.Client, nil, modeOf(be)...)
			// One hash tag: on Cluster the pipeline goes to one node.
			p := "cy:{t:hashes-" + be.Name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "}:"
			recs := map[string]map[string]string{
				p + "a": {"id": "a", "amount": "9223372036854775807", "blob": "\x00\xff{\"x\":1}", "empty": ""},
				p + "b": {"id": "b"},
			}
			for k, f := range recs {
				if err := be.Client.HSet(ctx, k, f).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := be.Client.Set(ctx, p+"str", "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name  string
				keys  []string
				want  []map[string]string
				fails bool
			}{
				{name: "none", keys: nil, want: nil},
				{name: "in order", keys: []string{p + "b", p + "a"}, want: []map[string]string{recs[p+"b"], recs[p+"a"]}},
				{name: "absent", keys: []string{p + "a", p + "gone", p + "b"}, want: []map[string]string{recs[p+"a"], {}, recs[p+"b"]}},
				{name: "same key twice", keys: []string{p + "a", p + "a"}, want: []map[string]string{recs[p+"a"], recs[p+"a"]}},
				{name: "wrong type", keys: []string{p + "a", p + "str"}, fails: true},
			} {
				got, err := ex.ReadHashes(ctx, c.keys)
				if (err != nil) != c.fails {
					t.Fatalf("%s: error %v", c.name, err)
				}
				if c.fails {
					continue
				}
				if len(got) != len(c.want) {
					t.Fatalf("%s: %d hashes, want %d", c.name, len(got), len(c.want))
				}
				for i := range got {
					if !maps.Equal(got[i], c.want[i]) {
						t.Fatalf("%s: hash %d = %q, want %q", c.name, i, got[i], c.want[i])
					}
				}
			}
		})
	}
}

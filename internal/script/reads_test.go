package script

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
			p := freshTag("hashes", be)
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

// TestReadStream: a page of entries after a cursor (exclusive), oldest
// first, with the stream's length and Redis TIME; an absent stream is an
// empty page; a cursor that is no stream id is refused before anything is
// sent.
func TestReadStream(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			ex := probeExec(t, be.Client, nil, modeOf(be)...)
			s := freshTag("stream", be) + "q"
			for i, id := range []string{"5-1", "5-2", "7-0", "9-3"} {
				if err := be.Client.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: id, Values: []string{"id", "r" + strconv.Itoa(i)}}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			redisNow, err := be.Client.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name, stream, after string
				count               int64
				want                []string // id=rid
				length              int64
				fails               bool
			}{
				{name: "from the first", stream: s, count: 2, want: []string{"5-1=r0", "5-2=r1"}, length: 4},
				{name: "after a cursor", stream: s, after: "5-2", count: 10, want: []string{"7-0=r2", "9-3=r3"}, length: 4},
				{name: "after the last", stream: s, after: "9-3", count: 10, want: nil, length: 4},
				{name: "absent stream", stream: s + "x", count: 10, want: nil, length: 0},
				{name: "bad cursor", stream: s, after: "x", count: 1, fails: true},
				{name: "no count", stream: s, count: 0, fails: true},
			} {
				p, err := ex.ReadStream(ctx, c.stream, c.after, c.count)
				if (err != nil) != c.fails {
					t.Fatalf("%s: error %v", c.name, err)
				}
				if c.fails {
					continue
				}
				var got []string
				for _, m := range p.Entries {
					got = append(got, m.ID+"="+m.Values["id"].(string))
				}
				if !slices.Equal(got, c.want) || p.Len != c.length {
					t.Fatalf("%s: entries %v length %d, want %v %d", c.name, got, p.Len, c.want, c.length)
				}
				if d := p.Now.Sub(redisNow); d < 0 || d > time.Minute {
					t.Fatalf("%s: now %v, Redis TIME was %v", c.name, p.Now, redisNow)
				}
			}
		})
	}
}

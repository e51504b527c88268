package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/store/redisinfo"
)

// BackendOn picks the mode cyclesd would pick: EVALSHA on an embedded store,
// whichever client reaches it, and on a real server FCALL exactly when
// every master runs Redis 7 (the check internal/store makes).
func TestBackendOn(t *testing.T) {
	emb := Embedded(t)
	clocked, _ := Clocked(t, time.Now())
	other := redis.NewClient(&redis.Options{Addr: emb.Options().Addr})
	t.Cleanup(func() { _ = other.Close() })
	for name, c := range map[string]redis.UniversalClient{"embedded": emb, "clocked": clocked, "second client": other} {
		if be := BackendOn(t, c); be.Functions || be.Name != "embedded" || be.Client != c {
			t.Errorf("%s: %+v, want the embedded leg through EVALSHA", name, be)
		}
	}
	real := Start(t).Client(t)
	want, err := redisinfo.Redis7(context.Background(), real)
	if err != nil {
		t.Fatal(err)
	}
	if be := BackendOn(t, real); be.Functions != want || be.Name != "redis" {
		t.Errorf("redis-server: %+v, want Functions %v", be, want)
	}
	// A closed store's address is forgotten: a server may get its port.
	var addr string
	t.Run("closed", func(t *testing.T) { addr = Embedded(t).Options().Addr })
	if _, ok := embeddedAddrs.Load(addr); ok {
		t.Errorf("%s still counted as embedded after its store closed", addr)
	}
}

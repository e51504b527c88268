package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

// TestEventGoldensPastRetentionOnTheBinary: the real binary with an
// archive. Every event read — one tenant's and the all-tenant feed's,
// WatchEvents from the start and from a cursor, ListEvents paged, on gRPC
// and, where the route exists (listings), on HTTP — answers with the same
// bytes once the archiver copied the logs and the feed and Redis retention
// trimmed their older part, and once Redis holds none of them (then
// everything is served from PostgreSQL).
func TestEventGoldensPastRetentionOnTheBinary(t *testing.T) {
	srv, dsn, d, httpAddr := startArchiving(t, "-event-heartbeat", "200ms")
	conn := d.conn(t)
	admin := cyclesv1.NewAdminServiceClient(conn)
	rt := cyclesv1.NewRuntimeServiceClient(conn)
	evs := cyclesv1.NewEventServiceClient(conn)
	tenants := []string{"evarc-a", "evarc-b"}
	keyOf := map[string]string{}
	for _, tn := range tenants {
		if _, err := admin.CreateTenant(adminCtx(), &cyclesv1.CreateTenantRequest{TenantId: tn, Name: tn}); err != nil {
			t.Fatal(err)
		}
		k, err := admin.CreateApiKey(adminCtx(), &cyclesv1.CreateApiKeyRequest{TenantId: tn, Name: "agents",
			Permissions: []string{"reservations:create", "events:read"}})
		if err != nil {
			t.Fatal(err)
		}
		keyOf[tn] = k.GetSecret()
		if _, err := admin.CreateBudget(adminCtx(), &cyclesv1.CreateBudgetRequest{TenantId: tn, ScopePath: "tenant:" + tn,
			Unit: cyclesv1.Unit_UNIT_TOKENS, Allocated: 1_000}); err != nil {
			t.Fatal(err)
		}
	}
	// Denied dry runs: reservation events a tenant key sees too.
	for i := 0; i < 3; i++ {
		for _, tn := range tenants {
			res, err := rt.CreateReservation(keyCtx(keyOf[tn]), &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("d%d", i),
				Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
				Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 5_000 + int64(i)}, DryRun: true})
			if err != nil || res.GetDecision() != cyclesv1.Decision_DECISION_DENY {
				t.Fatalf("dry run: %v %v", res, err)
			}
		}
	}
	tn, key := tenants[0], keyOf[tenants[0]]

	marshal := func(m proto.Message) []byte {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// watch reads a WatchEvents stream up to its first heartbeat (sent once
	// the watch has read everything there is).
	watch := func(ctx context.Context, req *cyclesv1.WatchEventsRequest) ([][]byte, []string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		st, err := evs.WatchEvents(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		var cursors []string
		for {
			res, err := st.Recv()
			if err != nil {
				t.Fatalf("watch %v: %v", req, err)
			}
			if res.GetHeartbeat() != nil {
				return out, cursors
			}
			out = append(out, marshal(res.GetEvent()))
			cursors = append(cursors, res.GetEvent().GetCursor())
		}
	}
	listGRPC := func(ctx context.Context, req *cyclesv1.ListEventsRequest) [][]byte {
		t.Helper()
		var out [][]byte
		for page := 0; page < 100; page++ {
			res, err := evs.ListEvents(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, marshal(res))
			if !res.GetHasMore() {
				return out
			}
			req = proto.CloneOf(req)
			req.Cursor = res.GetNextCursor()
		}
		t.Fatal("listing does not end")
		return nil
	}
	listHTTP := func(path string, hdr ...string) [][]byte {
		t.Helper()
		var out [][]byte
		cursor := ""
		for page := 0; page < 100; page++ {
			u := "http://" + httpAddr + path
			if cursor != "" {
				u += "&cursor=" + url.QueryEscape(cursor)
			}
			req, err := http.NewRequest("GET", u, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(hdr[0], hdr[1])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s: %d %s", u, resp.StatusCode, raw)
			}
			out = append(out, raw)
			var p struct {
				HasMore    bool   `json:"has_more"`
				NextCursor string `json:"next_cursor"`
			}
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatal(err)
			}
			if !p.HasMore {
				return out
			}
			cursor = p.NextCursor
		}
		t.Fatal("HTTP listing does not end")
		return nil
	}
	earliest := cyclesv1.StartPosition_START_POSITION_EARLIEST
	_, tenantCursors := watch(keyCtx(key), &cyclesv1.WatchEventsRequest{Start: earliest})
	_, feedCursors := watch(adminCtx(), &cyclesv1.WatchEventsRequest{Start: earliest})
	if len(tenantCursors) < 4 || len(feedCursors) < 8 {
		t.Fatalf("%d events of %s, %d in the feed: too few to prove anything", len(tenantCursors), tn, len(feedCursors))
	}
	reads := []struct {
		name string
		do   func() [][]byte
	}{
		{"gRPC watch, tenant key, from the start", func() [][]byte { e, _ := watch(keyCtx(key), &cyclesv1.WatchEventsRequest{Start: earliest}); return e }},
		{"gRPC watch, tenant key, from a cursor", func() [][]byte {
			e, _ := watch(keyCtx(key), &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_CURSOR, Cursor: tenantCursors[1]})
			return e
		}},
		{"gRPC watch, admin, one tenant", func() [][]byte {
			e, _ := watch(adminCtx(), &cyclesv1.WatchEventsRequest{TenantId: tenants[1], Start: earliest})
			return e
		}},
		{"gRPC watch, all tenants, from the start", func() [][]byte { e, _ := watch(adminCtx(), &cyclesv1.WatchEventsRequest{Start: earliest}); return e }},
		{"gRPC watch, all tenants, from a cursor", func() [][]byte {
			e, _ := watch(adminCtx(), &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_CURSOR, Cursor: feedCursors[2]})
			return e
		}},
		{"gRPC watch, all tenants, from now", func() [][]byte { e, _ := watch(adminCtx(), &cyclesv1.WatchEventsRequest{}); return e }},
		{"gRPC list, tenant key, pages of 2", func() [][]byte { return listGRPC(keyCtx(key), &cyclesv1.ListEventsRequest{Limit: 2}) }},
		{"gRPC list, all tenants, pages of 3", func() [][]byte { return listGRPC(adminCtx(), &cyclesv1.ListEventsRequest{Limit: 3}) }},
		{"HTTP list, tenant key, pages of 2", func() [][]byte { return listHTTP("/v1/events?limit=2", "X-Cycles-API-Key", key) }},
		{"HTTP list, admin, one tenant", func() [][]byte {
			return listHTTP("/v1/admin/events?limit=50&tenant_id="+tenants[1], "X-Admin-API-Key", adminKey)
		}},
		{"HTTP list, all tenants, pages of 3", func() [][]byte { return listHTTP("/v1/admin/events?limit=3", "X-Admin-API-Key", adminKey) }},
	}
	golden := make([][][]byte, len(reads))
	for i, r := range reads {
		golden[i] = r.do()
	}
	check := func(stage string) {
		t.Helper()
		for i, r := range reads {
			got := r.do()
			if len(got) != len(golden[i]) {
				t.Fatalf("%s, %s: %d items, want %d", stage, r.name, len(got), len(golden[i]))
			}
			for j := range got {
				if !bytes.Equal(got[j], golden[i][j]) {
					t.Fatalf("%s, %s: item %d differs\n got %q\nwant %q", stage, r.name, j, got[j], golden[i][j])
				}
			}
		}
	}

	// Wait until the archiver has copied every log and the feed.
	rc := srv.Client(t)
	ctx := context.Background()
	streams := []string{keys.Feed}
	for _, tn := range tenants {
		streams = append(streams, keys.Tenant(tn).Events())
	}
	pg, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(ctx)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var inRedis, archived int64
		for _, s := range streams {
			inRedis += rc.XLen(ctx, s).Val()
		}
		if err := pg.QueryRow(ctx, `SELECT (SELECT count(*) FROM cycles_feed) + (SELECT count(*) FROM cycles_events
			WHERE tenant_id = ANY($1))`, tenants).Scan(&archived); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if archived == inRedis {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d stream entries archived after 60 s", archived, inRedis)
		}
		time.Sleep(200 * time.Millisecond)
	}
	check("archived, still in Redis")
	for _, s := range streams {
		rc.XTrimMaxLen(ctx, s, 1) // what retention does to the older part
	}
	check("older parts trimmed")
	rc.Del(ctx, streams...)
	check("none left in Redis")
}

package ledger

import (
	"encoding/base64"
	"encoding/hex"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/idempotency"
)

// The payload hashes are stored in idempotency records: a change of a single
// byte makes every retry of a request stored before an upgrade a "different
// payload". These golden values pin the hash (the base64url of the first 16
// bytes of the SHA-256 of the request's deterministic encoding,
// lua/lib/idem.lua); any rewrite must reproduce them.
func TestPayloadHashesAreStable(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	meta, err := structpb.NewStruct(map[string]any{"b": "x", "a": 1.5, "nested": map[string]any{"k": []any{"v", true}}})
	if err != nil {
		t.Fatal(err)
	}
	full := &cyclesv1.Subject{Tenant: "acme", Workspace: "ws", App: "app", Workflow: "wf", Agent: "ag", Toolset: "ts",
		Dimensions: map[string]string{"region": "eu", "cost_center": "42", "a": "b"}}
	action := &cyclesv1.Action{Kind: "llm.completion", Name: "gpt", Tags: []string{"x", "y"}}
	est := &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1234}
	reserve := func(subj *cyclesv1.Subject, grace *int64) *cyclesv1.CreateReservationRequest {
		return &cyclesv1.CreateReservationRequest{IdempotencyKey: "k-1", Subject: subj, Action: action, Estimate: est,
			TtlMs: i64(60_000), GracePeriodMs: grace, OveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT,
			DryRun: true, Metadata: meta}
	}
	tests := []struct {
		name string
		hash func() (string, error)
		want string
	}{
		{"reserve full", func() (string, error) { return reserveHash("acme", reserve(full, i64(7))) }, "3522ebc77f9c5b08a75423e726317e97e5e204bf56acc8e4e4d76271510f2f7e"},
		{"reserve tenant omitted, grace default", func() (string, error) {
			return reserveHash("acme", reserve(&cyclesv1.Subject{Workspace: "ws"}, nil))
		}, "30d99a8561f8342e4b753a25e5ac43d2ef15472db3c22b50477b42d98978b5e4"},
		{"reserve explicit default grace", func() (string, error) {
			return reserveHash("acme", reserve(&cyclesv1.Subject{Tenant: "acme", Workspace: "ws"}, i64(DefaultGraceMs)))
		}, "30d99a8561f8342e4b753a25e5ac43d2ef15472db3c22b50477b42d98978b5e4"},
		{"reserve minimal", func() (string, error) { return reserveHash("acme", &cyclesv1.CreateReservationRequest{}) }, "e88a5d99b5c81ec4ff0a771fa676d251f12ebd11854e682d114706fca6524838"},
		{"decide", func() (string, error) {
			return decideHash("acme", &cyclesv1.DecideRequest{IdempotencyKey: "d", Subject: full, Action: action, Estimate: est, Metadata: meta})
		}, "f7789ad04d3e4ed2edc0a8a838c30ed9bb0304b3608caeddacb754035b6d45f9"},
		{"decide no subject", func() (string, error) { return decideHash("t2", &cyclesv1.DecideRequest{IdempotencyKey: "d"}) }, "a29682faa185d3881f1d03194c4ef1ecb0539b088b79e620d7a12951ee5325ce"},
		{"event", func() (string, error) {
			return eventHash("acme", &cyclesv1.CreateEventRequest{IdempotencyKey: "e", Subject: &cyclesv1.Subject{App: "a"}, Action: action,
				Actual: est, OveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_REJECT,
				Metrics:      &cyclesv1.StandardMetrics{TokensInput: i64(3), ModelVersion: "m", Custom: meta},
				ClientTimeMs: i64(1_700_000_000_000), Metadata: meta})
		}, "8df266a740457a6d762feec45f3d641fe40b781fb59fa0a5e33d88cd88c031f4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.hash()
			if err != nil {
				t.Fatal(err)
			}
			digest, err := hex.DecodeString(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if want := base64.RawURLEncoding.EncodeToString(digest[:16]); got != want {
				t.Errorf("hash %s, want %s (the first 16 bytes of %s)", got, want, tc.want)
			}
		})
	}
}

// The canonical copies in request.go list the fields of these messages: a new
// field must be added there, or it would silently drop out of the hash.
func TestPayloadHashCopiesEveryField(t *testing.T) {
	for m, n := range map[proto.Message]int{
		&cyclesv1.Subject{}: 7, &cyclesv1.CreateReservationRequest{}: 10, &cyclesv1.DecideRequest{}: 5,
		&cyclesv1.CreateEventRequest{}: 8,
	} {
		d := m.ProtoReflect().Descriptor()
		if got := d.Fields().Len(); got != n {
			t.Errorf("%s has %d fields, request.go copies %d: copy the new ones and update this count", d.FullName(), got, n)
		}
	}
}

// Unknown fields (a newer client's) stay part of the payload, as with a clone.
func TestPayloadHashKeepsUnknownFields(t *testing.T) {
	plain := &cyclesv1.CreateReservationRequest{IdempotencyKey: "k", Subject: &cyclesv1.Subject{Workspace: "w"}}
	extra := proto.Clone(plain).(*cyclesv1.CreateReservationRequest)
	extra.ProtoReflect().SetUnknown([]byte{0xf8, 0x06, 0x01}) // field 111, varint 1
	extra.Subject.ProtoReflect().SetUnknown([]byte{0xf8, 0x06, 0x02})
	h1, err1 := reserveHash("acme", plain)
	h2, err2 := reserveHash("acme", extra)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if h1 == h2 {
		t.Fatal("unknown fields dropped from the payload hash")
	}
	// The first implementation: a deep clone, canonicalized.
	clone := proto.Clone(extra).(*cyclesv1.CreateReservationRequest)
	clone.Subject.Tenant = "acme"
	grace := int64(DefaultGraceMs)
	clone.GracePeriodMs = &grace
	want, err := idempotency.PayloadHash(clone)
	if err != nil {
		t.Fatal(err)
	}
	if h2 != want {
		t.Fatalf("hash %s, a deep clone gives %s", h2, want)
	}
}

// Hashing never modifies the request (the handler and interceptors still read it).
func TestPayloadHashLeavesRequestAlone(t *testing.T) {
	req := &cyclesv1.CreateReservationRequest{IdempotencyKey: "k", Subject: &cyclesv1.Subject{Workspace: "w"}}
	before := proto.Clone(req)
	if _, err := reserveHash("acme", req); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(req, before) {
		t.Fatalf("request changed: %v", req)
	}
}

// BenchmarkReserveHash is the payload hash of a typical reservation (the
// subject names its tenant, as the SDKs send it).
func BenchmarkReserveHash(b *testing.B) {
	i64 := func(v int64) *int64 { return &v }
	req := &cyclesv1.CreateReservationRequest{IdempotencyKey: "0190b7c2-6d1e-7cc4-8a3e-1b2c3d4e5f60",
		Subject:  &cyclesv1.Subject{Tenant: "acme", Workspace: "prod", App: "chat", Agent: "planner"},
		Action:   &cyclesv1.Action{Kind: "llm.completion", Name: "gpt-4o"},
		Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1000}, TtlMs: i64(60_000)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reserveHash("acme", req); err != nil {
			b.Fatal(err)
		}
	}
}

// The payload hash of each creating request, as newCreating computes it.

func reserveHash(tenant string, req *cyclesv1.CreateReservationRequest) (string, error) {
	return idempotency.PayloadHash(reserveCanonical(req, withTenant(req.GetSubject(), tenant)))
}

func decideHash(tenant string, req *cyclesv1.DecideRequest) (string, error) {
	return idempotency.PayloadHash(decideCanonical(req, withTenant(req.GetSubject(), tenant)))
}

func eventHash(tenant string, req *cyclesv1.CreateEventRequest) (string, error) {
	return idempotency.PayloadHash(eventCanonical(req, withTenant(req.GetSubject(), tenant)))
}

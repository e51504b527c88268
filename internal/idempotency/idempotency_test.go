package idempotency

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Equal payloads hash equal (map order does not matter); any field change
// changes the hash.
func TestPayloadHash(t *testing.T) {
	a := &cyclesv1.FundBudgetRequest{TenantId: "t", ScopePath: "tenant:t", Amount: 5, IdempotencyKey: "k"}
	b := &cyclesv1.FundBudgetRequest{TenantId: "t", ScopePath: "tenant:t", Amount: 5, IdempotencyKey: "k"}
	ha, err := PayloadHash(a)
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := PayloadHash(b)
	if ha != hb || len(ha) != HashLen || strings.Contains(ha, ":") {
		t.Fatalf("equal payloads: %q vs %q", ha, hb)
	}
	b.Amount = 6
	if hc, _ := PayloadHash(b); hc == ha {
		t.Fatal("a different amount hashed the same")
	}
}

// The hash is the first 16 bytes of the SHA-256 of the deterministic
// encoding, as documented (docs/design.md#idempotency-records).
func TestPayloadHashIsTheSHA256Prefix(t *testing.T) {
	m := &cyclesv1.FundBudgetRequest{TenantId: "t", ScopePath: "tenant:t", Amount: 7, IdempotencyKey: "k"}
	h, err := PayloadHash(m)
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	sum := sha256.Sum256(enc)
	raw, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(raw) != hex.EncodeToString(sum[:])[:32] {
		t.Fatalf("hash %q is not the first 16 bytes of the SHA-256", h)
	}
}

// Package idempotency holds what every idempotent mutation shares outside
// Redis: the payload hash stored beside an idempotency key, so a replay with
// the same key and a different payload is told apart (docs/protocol.md#idempotency-and-replay).
package idempotency

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// HashLen is the length of a PayloadHash.
const HashLen = 22

// PayloadHash identifies m's payload: the first 16 bytes (128 bits) of the
// SHA-256 of its deterministic protobuf encoding, base64url without padding
// (22 characters, never ':'; lua/lib/idem.lua relies on both). 128 bits keep
// an accidental match of two payloads out of reach (2^-128 per pair; a
// deliberate one costs ~2^64 hashes and only fools the caller's own key)
// while every idempotency record stores 42 bytes less than a 64-hex hash
// would. Callers normalise m first (effective tenant, canonical scope)
// so requests that mean the same thing hash the same.
func PayloadHash(m proto.Message) (string, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("hash payload: %w", err)
	}
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:16]), nil
}

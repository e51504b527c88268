// Package idempotency holds what every idempotent mutation shares outside
// Redis: the payload hash stored beside an idempotency key, so a replay with
// the same key and a different payload is told apart (docs/protocol.md#idempotency-and-replay).
package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// PayloadHash is the hex SHA-256 of m's deterministic protobuf encoding.
// Callers normalise m first (effective tenant, canonical scope) so requests
// that mean the same thing hash the same.
func PayloadHash(m proto.Message) (string, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("hash payload: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

package ratelimitapi

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
)

func randSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

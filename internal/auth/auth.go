// Package auth identifies callers: tenant API keys (metadata x-cycles-api-key)
// and the admin key (metadata x-cycles-admin-key).
//
// A tenant API key has the form "cyc_<tenant>_<key_id>_<secret>" where key_id
// is 16 and secret 64 lowercase hex characters. The tenant and key id locate
// the key's record inside the tenant's hash slot; only SHA-256(secret key) is
// stored, and it is compared in constant time. Keys are parsed from the right,
// so tenant ids may contain '_'.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// Metadata keys.
const (
	APIKeyHeader         = "x-cycles-api-key"
	AdminKeyHeader       = "x-cycles-admin-key"
	IdempotencyKeyHeader = "x-idempotency-key"
	RequestIDHeader      = "x-request-id"
)

const (
	keyPrefix    = "cyc_"
	keyIDLen     = 16
	secretLen    = 64
	minTenantLen = 1
)

// Principal is the authenticated caller.
type Principal struct {
	// Tenant is the effective tenant of an API key (empty for the admin).
	Tenant string
	// KeyID is the API key id (empty for the admin).
	KeyID string
	// Admin is true for the admin key.
	Admin bool
	// Permissions are the API key's permissions (internal/permission); the
	// admin key holds every permission without listing them.
	Permissions []string
	// ExpiresAtMs is when the API key stops authenticating (epoch ms on the
	// store's clock; 0: never).
	ExpiresAtMs int64
	// ScopeFilter are the API key's scope patterns (internal/scopefilter,
	// canonical); empty: every scope of its tenant.
	ScopeFilter []string
}

type principalKey struct{}

// WithPrincipal stores p in ctx.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the caller stored by the auth interceptor.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// TenantFromContext returns the effective tenant of an API-key caller, or
// UNAUTHORIZED when the caller is not a tenant.
func TenantFromContext(ctx context.Context) (string, error) {
	p, ok := FromContext(ctx)
	if !ok || p.Tenant == "" {
		return "", apierr.New(apierr.Unauthorized, "a tenant API key is required")
	}
	return p.Tenant, nil
}

// ParsedKey is an API key split into its parts.
type ParsedKey struct {
	Tenant string
	KeyID  string
	Secret string
}

// ParseAPIKey splits a presented key; ok is false for anything malformed.
func ParseAPIKey(s string) (ParsedKey, bool) {
	if !strings.HasPrefix(s, keyPrefix) || len(s) > len(keyPrefix)+MaxTenantIDLen+1+keyIDLen+1+secretLen {
		return ParsedKey{}, false
	}
	rest := s[len(keyPrefix):]
	if len(rest) < minTenantLen+1+keyIDLen+1+secretLen {
		return ParsedKey{}, false
	}
	secret := rest[len(rest)-secretLen:]
	rest = rest[:len(rest)-secretLen]
	if !strings.HasSuffix(rest, "_") {
		return ParsedKey{}, false
	}
	rest = rest[:len(rest)-1]
	keyID := rest[len(rest)-keyIDLen:]
	rest = rest[:len(rest)-keyIDLen]
	if !strings.HasSuffix(rest, "_") {
		return ParsedKey{}, false
	}
	tenant := rest[:len(rest)-1]
	if !isLowerHex(keyID) || !isLowerHex(secret) || !ValidTenantID(tenant) {
		return ParsedKey{}, false
	}
	return ParsedKey{Tenant: tenant, KeyID: keyID, Secret: secret}, true
}

// NewAPIKey makes a fresh key for tenant: the presented secret and its parts.
func NewAPIKey(tenant string) (full string, parsed ParsedKey, err error) {
	id := make([]byte, keyIDLen/2)
	sec := make([]byte, secretLen/2)
	if _, err = rand.Read(id); err != nil {
		return "", ParsedKey{}, err
	}
	if _, err = rand.Read(sec); err != nil {
		return "", ParsedKey{}, err
	}
	parsed = ParsedKey{Tenant: tenant, KeyID: hex.EncodeToString(id), Secret: hex.EncodeToString(sec)}
	return keyPrefix + tenant + "_" + parsed.KeyID + "_" + parsed.Secret, parsed, nil
}

// HashSecret is the stored form of a key: hex SHA-256 of the whole presented key.
func HashSecret(full string) string {
	sum := sha256.Sum256([]byte(full))
	return hex.EncodeToString(sum[:])
}

// EqualHash compares two hex digests in constant time.
func EqualHash(a, b string) bool {
	return len(a) == len(b) && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// EqualAdminKey compares a presented admin key with the configured one in
// constant time (over their SHA-256, so lengths leak nothing either).
func EqualAdminKey(presented, configured string) bool {
	if configured == "" || presented == "" {
		return false
	}
	a := sha256.Sum256([]byte(presented))
	b := sha256.Sum256([]byte(configured))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// MaxTenantIDLen bounds tenant ids, so owner-tagged reservation ids
// ("r_<tenant>_<32 hex>") fit the protocol's 128 characters.
const MaxTenantIDLen = 64

// ValidTenantID reports whether s is a tenant id: [a-z0-9_.-]{1,64}, a
// scope value's alphabet in lower case.
func ValidTenantID(s string) bool {
	return scope.ValidToken(s, MaxTenantIDLen) && strings.ToLower(s) == s
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return len(s) > 0
}

// Verifier checks a tenant API key against the store.
type Verifier interface {
	// VerifyAPIKey returns the key's principal, or UNAUTHORIZED for an unknown,
	// revoked or malformed key.
	VerifyAPIKey(ctx context.Context, presented string) (Principal, error)
}

// LocalVerifier is implemented by verifiers that can answer some keys from
// memory, without I/O: the pre-auth tap (internal/server) uses it to refuse
// malformed and recently refused keys, and to accept cached ones, before a
// request body is read.
type LocalVerifier interface {
	// VerifyAPIKeyLocally returns (p, true, nil) for a key known good,
	// (_, true, err) for one known bad, and (_, false, nil) when only the
	// store can tell.
	VerifyAPIKeyLocally(ctx context.Context, presented string) (p Principal, known bool, err error)
}

// FirstMetadata returns the first value of key in the incoming metadata.
func FirstMetadata(ctx context.Context, key string) string {
	// ValueFromIncomingContext avoids copying the whole metadata map.
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

package admin

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

// CreateApiKey makes a key for the tenant and returns its secret once; only
// the SHA-256 of the presented key is stored. Unknown tenant is
// TENANT_NOT_FOUND, a CLOSED tenant TENANT_CLOSED.
func (s *Service) CreateApiKey(ctx context.Context, req *cyclesv1.CreateApiKeyRequest) (*cyclesv1.CreateApiKeyResponse, error) {
	tenant := req.GetTenantId()
	full, parsed, err := auth.NewAPIKey(tenant)
	if err != nil {
		return nil, fmt.Errorf("generate API key: %w", err)
	}
	if a := eventctx.AuditFrom(ctx); a != nil {
		a.ResourceID = parsed.KeyID // the audit entry names the key it created
	}
	return s.storeAPIKey(ctx, req.GetName(), full, parsed)
}

// ImportApiKey registers a key whose secret was made elsewhere (dev mode's
// fixed demo key, migrations). It must have the cyc_<tenant>_<id>_<secret>
// form; only its hash is stored.
func (s *Service) ImportApiKey(ctx context.Context, name, full string) (*cyclesv1.CreateApiKeyResponse, error) {
	parsed, ok := auth.ParseAPIKey(full)
	if !ok {
		return nil, apierr.Invalid("api_key", "is not a cyc_<tenant>_<16 hex>_<64 hex> key")
	}
	return s.storeAPIKey(ctx, name, full, parsed)
}

func (s *Service) storeAPIKey(ctx context.Context, name, full string, parsed auth.ParsedKey) (*cyclesv1.CreateApiKeyResponse, error) {
	tenant := parsed.Tenant
	tk := keys.Tenant(tenant)
	var rec record
	err := s.run(ctx, &rec, scriptCreateAPIKey,
		[]string{tk.Record(), tk.APIKey(parsed.KeyID), tk.APIKeys(), tk.Events()},
		tenant, parsed.KeyID, name, auth.HashSecret(full), s.eventContext(ctx))
	// Forget an earlier refusal of this very key (ImportApiKey of a key that
	// was presented before it existed).
	s.keys.created(auth.HashSecret(full))
	if err != nil {
		return nil, s.done(ctx, "CreateApiKey", err)
	}
	k, err := apiKeyFromRecord(rec)
	if err != nil {
		return nil, s.done(ctx, "CreateApiKey", err)
	}
	s.m.keysCreated.Add(ctx, 1)
	return &cyclesv1.CreateApiKeyResponse{ApiKey: k, Secret: full}, nil
}

// RevokeApiKey revokes a key (idempotent: revoking a REVOKED key returns it
// unchanged). Unknown is KEY_NOT_FOUND. The local verification cache forgets
// the key at once, and no verification that read the key before the revoke
// can put it back (keyCache's generation); other replicas forget it within
// their cache TTL.
func (s *Service) RevokeApiKey(ctx context.Context, req *cyclesv1.RevokeApiKeyRequest) (*cyclesv1.RevokeApiKeyResponse, error) {
	tenant, keyID := req.GetTenantId(), req.GetKeyId()
	tk := keys.Tenant(tenant)
	var out struct {
		Key        record `json:"key"`
		RevokedNow bool   `json:"revoked_now"`
	}
	s.keys.drop(tenant, keyID)
	err := s.run(ctx, &out, scriptRevokeAPIKey, []string{tk.APIKey(keyID), tk.Events()}, tenant, keyID, s.eventContext(ctx))
	// Drop again after the script, even when it failed: a verification that
	// read the key before the script committed took its generation snapshot
	// before this bump, so it cannot cache the key afterwards; dropping is
	// always safe, and a revocation that may have committed must not linger.
	// InvalidateKey drops it here and tells the other replicas; if that
	// publish fails they still forget the key within the cache TTL (counted,
	// not an error of the revocation, which did commit).
	_ = s.InvalidateKey(context.WithoutCancel(ctx), tenant, keyID)
	if err != nil {
		return nil, s.done(ctx, "RevokeApiKey", err)
	}
	k, err := apiKeyFromRecord(out.Key)
	if err != nil {
		return nil, s.done(ctx, "RevokeApiKey", err)
	}
	if out.RevokedNow {
		s.m.keysRevoked.Add(ctx, 1)
	}
	return &cyclesv1.RevokeApiKeyResponse{ApiKey: k}, nil
}

// Auth failure reasons (attribute "reason" of cycles.auth.failures). The
// client always sees the same UNAUTHORIZED message, so a caller cannot probe
// which part of a key was wrong.
const (
	authMalformed     = "malformed"
	authUnknownKey    = "unknown_key"
	authRevoked       = "revoked"
	authHashMismatch  = "hash_mismatch"
	authTenantMissing = "tenant_missing"
	authCachedRefusal = "cached_refusal" // refused moments ago (negative cache)
)

// VerifyAPIKey implements auth.Verifier: it parses the presented key, checks
// the in-process caches (positive, and briefly the refusals), else reads the key record and the tenant's status in
// one script and compares hashes in constant time. Unknown, malformed or
// revoked keys, and keys whose tenant record is gone, are UNAUTHORIZED. A
// SUSPENDED or CLOSED tenant's key still authenticates: reads stay available
// and the ledger refuses mutations with TENANT_SUSPENDED / TENANT_CLOSED.
// Redis being unreachable is UNAVAILABLE (fail closed), not UNAUTHORIZED.
func (s *Service) VerifyAPIKey(ctx context.Context, presented string) (auth.Principal, error) {
	pk, ok := auth.ParseAPIKey(presented)
	if !ok {
		return auth.Principal{}, s.authFail(ctx, authMalformed)
	}
	hash := auth.HashSecret(presented)
	if p, ok := s.keys.get(pk.Tenant, pk.KeyID, hash); ok {
		s.m.authCacheHits.Add(ctx, 1)
		return p, nil
	}
	if s.keys.refused(hash) {
		s.m.authNegHits.Add(ctx, 1)
		return auth.Principal{}, s.authFail(ctx, authCachedRefusal)
	}
	s.m.authCacheMisses.Add(ctx, 1)
	// Snapshot before reading Redis: a revoke that lands after this read
	// bumps the generation, and put/putRefused then store nothing.
	gen := s.keys.generation()
	tk := keys.Tenant(pk.Tenant)
	var out struct {
		Hash         string `json:"hash"`
		Status       string `json:"status"`
		TenantID     string `json:"tenant_id"`
		TenantStatus string `json:"tenant_status"`
	}
	if err := s.run(ctx, &out, scriptVerifyAPIKey, []string{tk.APIKey(pk.KeyID), tk.Record()}); err != nil {
		return auth.Principal{}, err
	}
	reason := ""
	switch {
	case out.Hash == "":
		reason = authUnknownKey
	case !auth.EqualHash(out.Hash, hash) || out.TenantID != pk.Tenant:
		reason = authHashMismatch
	case out.Status != "ACTIVE":
		reason = authRevoked
	case out.TenantStatus == "":
		reason = authTenantMissing
	}
	if reason != "" {
		s.keys.putRefused(gen, hash)
		return auth.Principal{}, s.authFail(ctx, reason)
	}
	p := auth.Principal{Tenant: pk.Tenant, KeyID: pk.KeyID}
	s.keys.put(gen, pk.Tenant, pk.KeyID, hash, p)
	return p, nil
}

// VerifyAPIKeyLocally implements auth.LocalVerifier: malformed keys, cached
// keys and recently refused keys are answered from memory; anything else
// needs VerifyAPIKey.
func (s *Service) VerifyAPIKeyLocally(ctx context.Context, presented string) (auth.Principal, bool, error) {
	pk, ok := auth.ParseAPIKey(presented)
	if !ok {
		return auth.Principal{}, true, s.authFail(ctx, authMalformed)
	}
	hash := auth.HashSecret(presented)
	if p, ok := s.keys.get(pk.Tenant, pk.KeyID, hash); ok {
		s.m.authCacheHits.Add(ctx, 1)
		return p, true, nil
	}
	if s.keys.refused(hash) {
		s.m.authNegHits.Add(ctx, 1)
		return auth.Principal{}, true, s.authFail(ctx, authCachedRefusal)
	}
	return auth.Principal{}, false, nil
}

func (s *Service) authFail(ctx context.Context, reason string) error {
	s.m.authFailures.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", reason)))
	return apierr.New(apierr.Unauthorized, "invalid API key")
}

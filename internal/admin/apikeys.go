package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/permission"
	"github.com/cyclesgo/cycles-go/internal/scopefilter"
	"github.com/cyclesgo/cycles-go/internal/script"
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
	return s.storeAPIKey(ctx, req, full, parsed)
}

// ImportApiKey registers a key whose secret was made elsewhere (dev mode's
// fixed demo key, migrations) with the given permissions (none: the default
// set). It must have the cyc_<tenant>_<id>_<secret> form; only its hash is
// stored.
func (s *Service) ImportApiKey(ctx context.Context, name, full string, perms ...string) (*cyclesv1.CreateApiKeyResponse, error) {
	parsed, ok := auth.ParseAPIKey(full)
	if !ok {
		return nil, apierr.Invalid("api_key", "is not a cyc_<tenant>_<16 hex>_<64 hex> key")
	}
	if i, err := permission.Check(perms); err != nil {
		return nil, apierr.Invalid(fmt.Sprintf("permissions[%d]", i), "%v", err)
	}
	return s.storeAPIKey(ctx, &cyclesv1.CreateApiKeyRequest{TenantId: parsed.Tenant, Name: name, Permissions: perms}, full, parsed)
}

// storeAPIKey stores a key with req's attributes; no permissions means the
// default set (internal/permission.Default).
func (s *Service) storeAPIKey(ctx context.Context, req *cyclesv1.CreateApiKeyRequest, full string, parsed auth.ParsedKey) (*cyclesv1.CreateApiKeyResponse, error) {
	tenant := parsed.Tenant
	tk := keys.Tenant(tenant)
	perms := req.GetPermissions()
	if len(perms) == 0 {
		perms = permission.Default
	}
	permsJSON, err := json.Marshal(perms)
	if err != nil {
		return nil, fmt.Errorf("encode permissions: %w", err)
	}
	expires := ""
	if req.ExpiresAtMs != nil {
		expires = strconv.FormatInt(req.GetExpiresAtMs(), 10)
	}
	filter, i, err := scopefilter.Check(tenant, req.GetScopeFilter())
	if err != nil {
		return nil, apierr.Invalid(fmt.Sprintf("scope_filter[%d]", i), "%v", err)
	}
	filterJSON := ""
	if len(filter) > 0 {
		b, err := json.Marshal(filter)
		if err != nil {
			return nil, fmt.Errorf("encode scope filter: %w", err)
		}
		filterJSON = string(b)
	}
	meta := ""
	if len(req.GetMetadata()) > 0 {
		b, err := json.Marshal(req.GetMetadata())
		if err != nil {
			return nil, fmt.Errorf("encode metadata: %w", err)
		}
		meta = string(b)
	}
	var rec record
	err = scriptCreateAPIKey.RunInto(ctx, s.exec, &rec,
		createKeyKeys{tk.Record(), tk.APIKey(parsed.KeyID), tk.APIKeys(), tk.Events()},
		createKeyArgs{tenant, parsed.KeyID, req.GetName(), auth.HashSecret(full), s.eventContext(ctx),
			string(permsJSON), expires, req.GetDescription(), meta, filterJSON})
	// Forget an earlier refusal of this very key (ImportApiKey of a key that
	// was presented before it existed).
	s.keys.created(auth.HashSecret(full))
	if err != nil {
		return nil, err
	}
	k, err := apiKeyFromRecord(rec)
	if err != nil {
		return nil, err
	}
	s.m.keysCreated.Add(ctx, 1)
	return &cyclesv1.CreateApiKeyResponse{ApiKey: k, Secret: full}, nil
}

// RevokeApiKey revokes a key (idempotent: revoking a REVOKED key returns it
// unchanged). Unknown is KEY_NOT_FOUND. The local verification cache forgets
// the key at once, and no verification that read the key before the revoke
// can put it back (keyCache's generation); other replicas forget it when the
// invalidation reaches them over pub/sub (InvalidateKey), or at the latest
// within their cache TTL if it is lost.
func (s *Service) RevokeApiKey(ctx context.Context, req *cyclesv1.RevokeApiKeyRequest) (*cyclesv1.RevokeApiKeyResponse, error) {
	tenant := req.GetTenantId()
	keyID, err := storedKeyID(tenant, req.GetKeyId())
	if err != nil {
		return nil, err
	}
	tk := keys.Tenant(tenant)
	var out revokeReply
	s.keys.drop(tenant, keyID)
	err = scriptRevokeAPIKey.RunInto(ctx, s.exec, &out, keyEventKeys{tk.APIKey(keyID), tk.Events()},
		revokeKeyArgs{tenant, keyID, s.eventContext(ctx), req.GetReason()})
	// Drop again after the script, even when it failed: a verification that
	// read the key before the script committed took its generation snapshot
	// before this bump, so it cannot cache the key afterwards; dropping is
	// always safe, and a revocation that may have committed must not linger.
	// InvalidateKey drops it here and tells the other replicas; if that
	// publish fails they still forget the key within the cache TTL (counted,
	// not an error of the revocation, which did commit).
	_ = s.InvalidateKey(context.WithoutCancel(ctx), tenant, keyID)
	if err != nil {
		return nil, err
	}
	k, err := apiKeyFromRecord(out.Key)
	if err != nil {
		return nil, err
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
	authExpired       = "expired"
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
		s.touches.note(pk.Tenant, pk.KeyID)
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
	v, err := s.readKey(ctx, pk, hash)
	if err != nil {
		return auth.Principal{}, err
	}
	if v.reason != "" {
		s.keys.putRefused(gen, hash)
		return auth.Principal{}, s.authFail(ctx, v.reason)
	}
	s.keys.put(gen, pk.Tenant, pk.KeyID, hash, v.p, v.until)
	s.touches.note(pk.Tenant, pk.KeyID)
	return v.p, nil
}

// keyVerdict is what the store says of one presented key.
type keyVerdict struct {
	// p is the key's principal (reason == "").
	p auth.Principal
	// until is how long a verification may be trusted before the key
	// expires (0: no expiry).
	until time.Duration
	// reason is why the key does not authenticate (auth* constants; "" = it does).
	reason string
	// tenantStatus is the key's tenant's status ("" = no tenant record).
	tenantStatus string
}

// readKey reads a parsed key and its tenant's status in one script and
// judges it: hashes compared in constant time, status, tenant, and expiry
// against the store's clock.
func (s *Service) readKey(ctx context.Context, pk auth.ParsedKey, hash string) (keyVerdict, error) {
	tk := keys.Tenant(pk.Tenant)
	var out verifyReply
	if err := scriptVerifyAPIKey.RunInto(ctx, s.exec, &out, verifyKeyKeys{tk.APIKey(pk.KeyID), tk.Record()}, script.None{}); err != nil {
		return keyVerdict{}, err
	}
	perms, expiresAt, now, err := keyGrants(out.Permissions, out.ExpiresAt, out.Now)
	if err != nil {
		return keyVerdict{}, fmt.Errorf("API key %s/%s: %w", pk.Tenant, pk.KeyID, err)
	}
	v := keyVerdict{tenantStatus: out.TenantStatus}
	switch {
	case out.Hash == "":
		v.reason = authUnknownKey
	case !auth.EqualHash(out.Hash, hash) || out.TenantID != pk.Tenant:
		v.reason = authHashMismatch
	case out.Status != "ACTIVE":
		v.reason = authRevoked
	case out.TenantStatus == "":
		v.reason = authTenantMissing
	case expiresAt != 0 && now >= expiresAt:
		v.reason = authExpired
	}
	if v.reason != "" {
		return v, nil
	}
	filter, err := storedStrings(out.ScopeFilter)
	if err != nil {
		return keyVerdict{}, fmt.Errorf("API key %s/%s: stored scope_filter: %w", pk.Tenant, pk.KeyID, err)
	}
	v.p = auth.Principal{Tenant: pk.Tenant, KeyID: pk.KeyID, Permissions: perms, ExpiresAtMs: expiresAt, ScopeFilter: filter}
	// A cached verification ends when the key expires: the time left on the
	// store's clock, counted on this process's monotonic clock from now.
	if expiresAt != 0 {
		v.until = time.Duration(expiresAt-now) * time.Millisecond
	}
	return v, nil
}

// keyGrants decodes what the verify script read: the permissions (a key
// stored without them has permission.Legacy, what every key could do before
// keys carried permissions), expires_at (0: never) and the store's clock.
func keyGrants(perms, expiresAt, now string) ([]string, int64, int64, error) {
	held := permission.Legacy
	if perms != "" {
		held = nil
		if err := json.Unmarshal([]byte(perms), &held); err != nil {
			return nil, 0, 0, fmt.Errorf("stored permissions: %w", err)
		}
	}
	var exp, n int64
	var err error
	if expiresAt != "" {
		if exp, err = strconv.ParseInt(expiresAt, 10, 64); err != nil {
			return nil, 0, 0, fmt.Errorf("stored expires_at: %w", err)
		}
	}
	if n, err = strconv.ParseInt(now, 10, 64); err != nil {
		return nil, 0, 0, fmt.Errorf("store clock: %w", err)
	}
	return held, exp, n, nil
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
		s.touches.note(pk.Tenant, pk.KeyID)
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

// storedStrings decodes a stored JSON string array (” = none).
func storedStrings(v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, err
	}
	return out, nil
}

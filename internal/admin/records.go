package admin

import (
	"encoding/json"
	"slices"
	"strconv"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/enumkey"
	"github.com/cyclesgo/cycles-go/internal/permission"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// Record decoding: script results carry the hashes as string maps with the
// field names of internal/keys/records.go. A malformed stored value is
// INTERNAL_ERROR (fail closed), never silently zero; an absent field is zero.

type record map[string]string

// decoder collects the first malformed field of one record.
type decoder struct {
	kind string
	err  error
}

func (d *decoder) bad(field, value string) {
	if d.err == nil {
		d.err = apierr.New(apierr.InternalError, "stored %s has a malformed %s %q", d.kind, field, value)
	}
}

func (d *decoder) int64(r record, field string) int64 {
	v, ok := r[field]
	if !ok || v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		d.bad(field, v)
	}
	return n
}

// optInt64 is an optional integer field: nil when absent or "".
func (d *decoder) optInt64(r record, field string) *int64 {
	if r[field] == "" {
		return nil
	}
	n := d.int64(r, field)
	return &n
}

// enumField is a required enum field stored in key form (enumkey.Of); a
// missing or unknown key is malformed.
func enumField[E enumkey.Value](d *decoder, r record, field string) E {
	v, ok := enumkey.Parse[E](r[field])
	if !ok {
		d.bad(field, r[field])
	}
	return v
}

func (d *decoder) int32(r record, field string) int32 {
	n := d.int64(r, field)
	if n < -1<<31 || n > 1<<31-1 {
		d.bad(field, r[field])
		return 0
	}
	return int32(n)
}

func (d *decoder) metadata(r record, field string) map[string]string {
	v := r[field]
	if v == "" || v == "{}" {
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		d.bad(field, v)
		return nil
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

func (d *decoder) policy(r record, field string) cyclesv1.CommitOveragePolicy {
	v := r[field]
	if v == "" {
		return cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_UNSPECIFIED
	}
	p := scope.ParsePolicy(v)
	if p == cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_UNSPECIFIED {
		d.bad(field, v)
	}
	return p
}

// tenantFromRecord builds the Tenant message of a tenant hash.
func tenantFromRecord(r record) (*cyclesv1.Tenant, error) {
	d := &decoder{kind: "tenant"}
	t := &cyclesv1.Tenant{
		TenantId:                   r["tenant_id"],
		Name:                       r["name"],
		Status:                     enumField[cyclesv1.TenantStatus](d, r, "status"),
		DefaultCommitOveragePolicy: d.policy(r, "default_policy"),
		DefaultReservationTtlMs:    d.int64(r, "default_ttl_ms"),
		MaxReservationTtlMs:        d.int64(r, "max_ttl_ms"),
		MaxReservationExtensions:   d.int32(r, "max_extensions"),
		CreatedAtMs:                d.int64(r, "created_at"),
		UpdatedAtMs:                d.int64(r, "updated_at"),
		Metadata:                   d.metadata(r, "metadata"),
	}
	t.ClosedAtMs = d.optInt64(r, "closed_at")
	// v0.1.26: absent (every tenant stored before it) reads as ENFORCE.
	t.ObserveMode = cyclesv1.ObserveMode_OBSERVE_MODE_ENFORCE
	if v := r["observe_mode"]; v != "" {
		m, ok := actionkind.ParseObserveMode(v)
		if !ok {
			d.bad("observe_mode", v)
		}
		t.ObserveMode = m
	}
	return t, d.err
}

// apiKeyFromRecord builds the ApiKey message of an API key hash.
func apiKeyFromRecord(r record) (*cyclesv1.ApiKey, error) {
	d := &decoder{kind: "API key"}
	k := &cyclesv1.ApiKey{
		KeyId:       auth.PublicKeyID(r["tenant_id"], r["key_id"]),
		TenantId:    r["tenant_id"],
		Name:        r["name"],
		Status:      enumField[cyclesv1.ApiKeyStatus](d, r, "status"),
		CreatedAtMs: d.int64(r, "created_at"),
	}
	k.RevokedAtMs = d.optInt64(r, "revoked_at")
	k.ExpiresAtMs = d.optInt64(r, "expires_at")
	k.Permissions = slices.Clone(permission.Legacy)
	if v := r["permissions"]; v != "" {
		k.Permissions = nil
		if err := json.Unmarshal([]byte(v), &k.Permissions); err != nil {
			d.bad("permissions", v)
		}
	}
	if v := r["metadata"]; v != "" {
		if err := json.Unmarshal([]byte(v), &k.Metadata); err != nil {
			d.bad("metadata", v)
		}
	}
	if v := r["scope_filter"]; v != "" {
		if err := json.Unmarshal([]byte(v), &k.ScopeFilter); err != nil {
			d.bad("scope_filter", v)
		}
	}
	k.LastUsedAtMs = d.optInt64(r, "last_used_at")
	k.Description, k.RevokedReason = r["description"], r["revoked_reason"]
	return k, d.err
}

// withIdentity fills scope_path and unit from the key when a (seeded) budget
// hash lacks them.
func (r record) withIdentity(scopePath, unit string) record {
	if r == nil {
		r = record{}
	}
	if r["scope_path"] == "" {
		r["scope_path"] = scopePath
	}
	if r["unit"] == "" {
		r["unit"] = unit
	}
	return r
}

// budgetFromRecord builds the Budget message of a budget hash of tenant.
func budgetFromRecord(tenant string, r record) (*cyclesv1.Budget, error) {
	d := &decoder{kind: "budget"}
	status := r["status"]
	if status == "" {
		status = "ACTIVE" // docs/protocol.md#scopes-and-budgets: absent = ACTIVE
	}
	st, ok := cyclesv1.BudgetStatus_value["BUDGET_STATUS_"+status]
	if !ok || st == 0 {
		d.bad("status", status)
	}
	unit := scope.ParseUnit(r["unit"])
	if unit == cyclesv1.Unit_UNIT_UNSPECIFIED {
		d.bad("unit", r["unit"])
	}
	overLimit := false
	switch r["is_over_limit"] {
	case "true":
		overLimit = true
	case "false", "":
	default:
		d.bad("is_over_limit", r["is_over_limit"])
	}
	b := &cyclesv1.Budget{
		TenantId:            tenant,
		ScopePath:           r["scope_path"],
		Unit:                unit,
		Allocated:           d.int64(r, "allocated"),
		Remaining:           d.int64(r, "remaining"),
		Reserved:            d.int64(r, "reserved"),
		Spent:               d.int64(r, "spent"),
		Debt:                d.int64(r, "debt"),
		OverdraftLimit:      d.int64(r, "overdraft_limit"),
		IsOverLimit:         overLimit,
		Status:              cyclesv1.BudgetStatus(st),
		CommitOveragePolicy: d.policy(r, "commit_overage_policy"),
		CreatedAtMs:         d.int64(r, "created_at"),
		UpdatedAtMs:         d.int64(r, "updated_at"),
		Metadata:            d.metadata(r, "metadata"),
	}
	if v := r["caps"]; v != "" {
		c, err := DecodeCaps(v)
		if err != nil {
			d.bad("caps", v)
		}
		b.Caps = c
	}
	return b, d.err
}

// capsJSON is the stored form of Caps in a budget's `caps` field: proto field
// names, int64 values as JSON numbers, unset members omitted. Both
// encoding/json (into cyclesv1.Caps) and protojson decode it.
type capsJSON struct {
	MaxTokens         *int64   `json:"max_tokens,omitempty"`
	MaxStepsRemaining *int64   `json:"max_steps_remaining,omitempty"`
	ToolAllowlist     []string `json:"tool_allowlist,omitempty"`
	ToolDenylist      []string `json:"tool_denylist,omitempty"`
	CooldownMs        *int64   `json:"cooldown_ms,omitempty"`
}

// EncodeCaps is the stored JSON of c (the `caps` budget field).
func EncodeCaps(c *cyclesv1.Caps) (string, error) {
	b, err := json.Marshal(capsJSON{
		MaxTokens: c.MaxTokens, MaxStepsRemaining: c.MaxStepsRemaining,
		ToolAllowlist: c.GetToolAllowlist(), ToolDenylist: c.GetToolDenylist(), CooldownMs: c.CooldownMs,
	})
	return string(b), err
}

// DecodeCaps parses the `caps` budget field.
func DecodeCaps(s string) (*cyclesv1.Caps, error) {
	var c capsJSON
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return nil, err
	}
	return &cyclesv1.Caps{
		MaxTokens: c.MaxTokens, MaxStepsRemaining: c.MaxStepsRemaining,
		ToolAllowlist: c.ToolAllowlist, ToolDenylist: c.ToolDenylist, CooldownMs: c.CooldownMs,
	}, nil
}

// metadataJSON is the stored form of a metadata map (always an object).
func metadataJSON(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m) // map[string]string always marshals
	return string(b)
}

package auth

import "strings"

// An API key's id is stored inside its tenant as 16 lowercase hex characters
// (its local id). Both wires show it as "<tenant>_<local id>" (PublicKeyID):
// the admin spec's routes name a key by key_id alone, so the id a client sees
// must locate the key without a tenant_id beside it, and the gRPC and HTTP
// answers must name a key the same way. Requests that also carry tenant_id
// accept either form (LocalKeyID).

// localKeyIDLen is the length of a local key id.
const localKeyIDLen = 16

// IsLocalKeyID reports whether s is a local key id (16 lowercase hex).
func IsLocalKeyID(s string) bool {
	return len(s) == localKeyIDLen && strings.Trim(s, "0123456789abcdef") == ""
}

// PublicKeyID is the id both wires show for tenant's key local. Anything
// that is not a local id (already public, the admin's marker, empty) is
// returned unchanged, so it is safe on stored values of any age.
func PublicKeyID(tenant, local string) string {
	if tenant == "" || !IsLocalKeyID(local) {
		return local
	}
	return tenant + "_" + local
}

// SplitKeyID splits a public key id into its tenant and local id; ok is
// false for anything else.
func SplitKeyID(id string) (tenant, local string, ok bool) {
	i := strings.LastIndexByte(id, '_')
	if i <= 0 || !IsLocalKeyID(id[i+1:]) || !ValidTenantID(id[:i]) {
		return "", "", false
	}
	return id[:i], id[i+1:], true
}

// ValidKeyID reports whether id is a key id in either form.
func ValidKeyID(id string) bool {
	_, _, public := SplitKeyID(id)
	return public || IsLocalKeyID(id)
}

// LocalKeyID is the local id a request of tenant names: a local id as is, or
// a public id of tenant's key; ok is false for anything else (a public id of
// another tenant included).
func LocalKeyID(tenant, id string) (local string, ok bool) {
	if IsLocalKeyID(id) {
		return id, true
	}
	if t, l, split := SplitKeyID(id); split && t == tenant {
		return l, true
	}
	return "", false
}

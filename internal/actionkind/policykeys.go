package actionkind

import (
	"encoding/json"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// MatchKeys is what the quota allowlists (host_allowlist,
// recipient_domain_allowlist, resource_type_allowlist) may match for a call
// of kind carrying pk: a JSON object of the provided keys among host,
// recipient_domain and resource_type, or "" when none applies (the scripts'
// fast path). Per the v0.1.26 POLICY KEYS EVALUATION SEMANTICS a dimension
// the kind's policy_key_spec does not declare is ignored for matching (it
// still travels in the stored action and the events). Reading for kinds
// without a registry spec (an unregistered kind, a declared custom kind):
// there is nothing to restrict against, so every provided key may match;
// skipping them would silently switch off an operator's quota.
// docs/protocol.md#v0126-action-governance.
func (r *Registry) MatchKeys(kind string, pk *cyclesv1.ActionPolicyKeys) string {
	if pk == nil {
		return ""
	}
	host, domain, resource := pk.GetHost(), pk.GetRecipientDomain(), pk.GetResourceType()
	if k, ok := r.Builtin(kind); ok {
		spec := k.PolicyKeys
		if spec == nil {
			spec = &PolicyKeySpec{}
		}
		if !spec.Host {
			host = ""
		}
		if !spec.RecipientDomain {
			domain = ""
		}
		if spec.ResourceType == "" {
			resource = ""
		}
	}
	m := make(map[string]string, 3)
	for name, v := range map[string]string{"host": host, "recipient_domain": domain, "resource_type": resource} {
		if v != "" {
			m[name] = v
		}
	}
	if len(m) == 0 {
		return ""
	}
	b, err := json.Marshal(m) // string values only: cannot fail
	if err != nil {
		return ""
	}
	return string(b)
}

package cycleshttp

import (
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// The protocol spells enum values without the proto prefix ("TOKENS", not
// "UNIT_TOKENS"). These tables translate both ways; an unknown spelling is
// INVALID_REQUEST naming the field, never a silent default.

var (
	unitNames     = enumNames(cyclesv1.Unit_name, "UNIT_")
	unitValues    = enumValues(unitNames)
	decisionNames = enumNames(cyclesv1.Decision_name, "DECISION_")
	statusNames   = enumNames(cyclesv1.ReservationStatus_name, "RESERVATION_STATUS_")
	policyNames   = enumNames(cyclesv1.CommitOveragePolicy_name, "COMMIT_OVERAGE_POLICY_")
	policyValues  = enumValues(policyNames)
)

func enumNames(protoNames map[int32]string, prefix string) map[int32]string {
	out := make(map[int32]string, len(protoNames))
	for v, n := range protoNames {
		if v == 0 {
			continue // UNSPECIFIED has no wire spelling
		}
		out[v] = strings.TrimPrefix(n, prefix)
	}
	return out
}

func enumValues(names map[int32]string) map[string]int32 {
	out := make(map[string]int32, len(names))
	for v, n := range names {
		out[n] = v
	}
	return out
}

func parseEnum(field, s string, values map[string]int32) (int32, error) {
	if v, ok := values[s]; ok {
		return v, nil
	}
	return 0, apierr.Invalid(field, "unknown value %q", s)
}

func unitName(u cyclesv1.Unit) string { return unitNames[int32(u)] }

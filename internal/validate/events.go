package validate

import (
	"fmt"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// EventService request validators (shape only; internal/events decides who may
// read which tenant and category, and decodes cursors).
func init() {
	register(func(r *cyclesv1.WatchEventsRequest) error {
		if err := first(
			eventSelection(r.GetTenantId(), r.GetEventTypes(), r.GetCategories(), r.GetScopePrefix()),
			typedEventTypes(r.GetTypes()),
			declared("start", r.GetStart(), "unknown start position %d", r.GetStart()),
			Cursor("cursor", r.GetCursor()),
		); err != nil {
			return err
		}
		withCursor := r.GetStart() == cyclesv1.StartPosition_START_POSITION_CURSOR
		if withCursor && r.GetCursor() == "" {
			return invalid("cursor", "is required with start START_POSITION_CURSOR")
		}
		if !withCursor && r.GetCursor() != "" {
			return invalid("cursor", "is only allowed with start START_POSITION_CURSOR")
		}
		return nil
	})
	register(func(r *cyclesv1.ListEventsRequest) error {
		if err := first(
			eventSelection(r.GetTenantId(), r.GetEventTypes(), r.GetCategories(), r.GetScopePrefix()),
			typedEventTypes(r.GetTypes()),
		); err != nil {
			return err
		}
		if r.FromMs != nil {
			if err := NonNegative("from_ms", r.GetFromMs()); err != nil {
				return err
			}
		}
		if r.ToMs != nil {
			if err := NonNegative("to_ms", r.GetToMs()); err != nil {
				return err
			}
		}
		if r.FromMs != nil && r.ToMs != nil && r.GetFromMs() > r.GetToMs() {
			return invalid("from_ms", "must not be after to_ms")
		}
		return first(
			Limit("limit", &r.Limit, 200),
			Cursor("cursor", r.GetCursor()),
		)
	})
	register(func(r *cyclesv1.GetEventRequest) error {
		if r.GetTenantId() != "" {
			if err := TenantID("tenant_id", r.GetTenantId()); err != nil {
				return err
			}
		}
		if r.GetEventId() == "" {
			return invalid("event_id", "is required")
		}
		return Text("event_id", r.GetEventId(), maxEventID)
	})
}

// maxEventID bounds an event id: ours are at most 85 characters ("evt_" +
// tenant + "_" + 16 hex; older ones "evt_" + 16 hex);
// any other string up to this length is simply not found.
const maxEventID = 128

// eventCategories are the protocol's EventCategory values (docs/protocol.md#events).
var eventCategories = map[string]bool{
	"budget": true, "tenant": true, "api_key": true, "policy": true,
	"reservation": true, "system": true, "webhook": true,
}

const (
	maxEventFilters = 64
	maxScopePrefix  = 1024
)

func eventSelection(tenantID string, types, cats []string, scopePrefix string) error {
	if tenantID != "" {
		if err := TenantID("tenant_id", tenantID); err != nil {
			return err
		}
	}
	if len(types) > maxEventFilters {
		return invalid("event_types", "at most %d entries", maxEventFilters)
	}
	for i, t := range types {
		if !isEventType(t) {
			return invalid(fmt.Sprintf("event_types[%d]", i), "must be 1..64 characters of [a-z0-9_.] (e.g. reservation.expired)")
		}
	}
	if len(cats) > len(eventCategories) {
		return invalid("categories", "at most %d entries", len(eventCategories))
	}
	for i, c := range cats {
		if !eventCategories[c] {
			return invalid(fmt.Sprintf("categories[%d]", i), "must be one of budget, tenant, api_key, policy, reservation, system, webhook")
		}
	}
	if scopePrefix != "" {
		if err := Text("scope_prefix", scopePrefix, maxScopePrefix); err != nil {
			return err
		}
	}
	return nil
}

// isEventType: 1..64 of [a-z0-9_.] (custom types use the "custom." prefix).
func isEventType(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// typedEventTypes checks the typed filter: known, non-UNSPECIFIED values.
func typedEventTypes(types []cyclesv1.EventType) error {
	if len(types) > maxEventFilters {
		return invalid("types", "at most %d entries", maxEventFilters)
	}
	for i, t := range types {
		if _, ok := cyclesv1.EventType_name[int32(t)]; !ok || t == cyclesv1.EventType_EVENT_TYPE_UNSPECIFIED {
			return invalid(fmt.Sprintf("types[%d]", i), "must be a known EventType other than UNSPECIFIED")
		}
	}
	return nil
}

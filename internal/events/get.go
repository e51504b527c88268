package events

import (
	"context"
	"fmt"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// scriptFind looks for one event id in a window of a stream (lua/events/find.lua).
var scriptFind = script.Define("events/find")

// findWindow is how many entries one events/find call examines: large enough
// that a search costs few round trips, small enough that one call stays a
// short, bounded piece of Redis work.
const findWindow = 2000

// found is one events/find result (lua/events/find.lua).
type found struct {
	Now   int64  `json:"now"`
	Found *entry `json:"found"`
	Last  string `json:"last"`
	More  bool   `json:"more"`
}

// Get reads one event by id from one tenant's log. An event id carries no
// tenant and no log position (it is "evt_" + 16 hex, as the protocol's
// envelope has it), so the tenant is the caller's own (tenant key) or named
// (admin key, tenant_id required), and the log is searched newest first in
// windows of findWindow entries until the id is found or the log ends. The
// cost therefore grows with the number of that tenant's events newer than the
// one sought; the RPC deadline bounds it. An event the caller may not see (a
// category outside a tenant key's) is EVENT_NOT_FOUND, like a missing one, so
// a tenant key learns nothing about events it cannot read.
func (s *Service) Get(ctx context.Context, p auth.Principal, req *cyclesv1.GetEventRequest) (*cyclesv1.GetEventResponse, error) {
	if p.Admin && req.GetTenantId() == "" {
		return nil, apierr.Invalid("tenant_id", "is required with the admin key: an event id does not name its tenant")
	}
	f, err := resolve(p, req.GetTenantId(), nil, nil, "", "")
	if err != nil {
		return nil, err
	}
	id := req.GetEventId()
	notFound := apierr.New(apierr.EventNotFound, "event %s not found in tenant %s", id, f.tenant).With("event_id", id)
	if !isEventID(id) {
		return nil, notFound
	}
	stream := keys.Tenant(f.tenant).Events()
	from := "+"
	for {
		var out found
		if err := s.r.exec.RunInto(ctx, &out, scriptFind, []string{stream}, id, from, findWindow); err != nil {
			return nil, fmt.Errorf("find event %s of tenant %s: %w", id, f.tenant, err)
		}
		if out.Found != nil {
			sid, err := ParseID(out.Found.ID)
			if err != nil {
				return nil, err
			}
			ev := toEvent(f.tenant, *out.Found, sid)
			if !f.match(ev) {
				return nil, notFound
			}
			return &cyclesv1.GetEventResponse{Event: ev}, nil
		}
		if !out.More || out.Last == "" {
			return nil, notFound
		}
		from = "(" + out.Last
	}
}

// isEventID reports whether id has the form event_emitter gives event ids
// (lua/lib/core.lua): "evt_" + 16 lowercase hex. Anything else cannot be in a
// log, so it is not searched for.
func isEventID(id string) bool {
	if len(id) != 20 || id[:4] != "evt_" {
		return false
	}
	for i := 4; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

package events

import (
	"context"
	"fmt"
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// scriptFind looks for one event id in a window of a stream (lua/events/find.lua).
var scriptFind = script.Bind[streamKeys, findArgs]("events/find")

// streamKeys are the KEYS of the scripts that read one event stream.
type streamKeys struct {
	Stream string `lua:"event_stream"`
}

type findArgs struct {
	ID     string `lua:"event_id"`
	From   string `lua:"from"`
	Window int64  `lua:"window"`
}

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

// Get reads one event by id. An event id names its tenant
// ("evt_<tenant>_<16 hex>", lib/core.lua event_id), so the log to search is
// known without a tenant_id and without any global index (which would put a
// key outside the tenant's Cluster slot into every ledger script). Events
// written before ids carried the tenant ("evt_" + 16 hex) need tenant_id with
// the admin key. The tenant's log is searched newest first in windows of
// findWindow entries until the id is found or the log ends, so the cost grows
// with the number of that tenant's events newer than the one sought (recent
// events: one call); the RPC deadline bounds it. An event the caller may not
// see (another tenant's, or a category outside a tenant key's) is
// EVENT_NOT_FOUND, like a missing one, so a tenant key learns nothing about
// events it cannot read.
func (s *Service) Get(ctx context.Context, p auth.Principal, req *cyclesv1.GetEventRequest) (*cyclesv1.GetEventResponse, error) {
	id := req.GetEventId()
	idTenant, named := TenantOfEventID(id)
	tenantID := req.GetTenantId()
	if p.Admin && tenantID == "" {
		if !named {
			if !isEventID(id) {
				return nil, apierr.New(apierr.EventNotFound, "event %s not found", id).With("event_id", id)
			}
			return nil, apierr.Invalid("tenant_id", "is required for an event id written before ids named their tenant")
		}
		tenantID = idTenant
	}
	f, err := resolve(p, tenantID, nil, nil, "", "")
	if err != nil {
		return nil, err
	}
	notFound := apierr.New(apierr.EventNotFound, "event %s not found in tenant %s", id, f.tenant).With("event_id", id)
	if !isEventID(id) || named && idTenant != f.tenant {
		return nil, notFound
	}
	stream := keys.Tenant(f.tenant).Events()
	from := "+"
	for {
		var out found
		if err := scriptFind.RunInto(ctx, s.r.exec, &out, streamKeys{stream}, findArgs{id, from, findWindow}); err != nil {
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
			return s.getArchived(ctx, f, id, notFound)
		}
		from = "(" + out.Last
	}
}

// isEventID reports whether id has a form the scripts give event ids: "evt_"
// + 16 lowercase hex (before ids named their tenant), or "evt_" + tenant +
// "_" + 16 lowercase hex (lib/core.lua event_id). Anything else cannot be in
// a log, so it is not searched for.
func isEventID(id string) bool {
	if _, ok := TenantOfEventID(id); ok {
		return true
	}
	return len(id) == 20 && strings.HasPrefix(id, "evt_") && isLowerHex(id[4:])
}

// TenantOfEventID returns the tenant an event id names ("evt_<tenant>_<16
// hex>"); false for an id of another form (including the older "evt_" + 16
// hex, which names none).
func TenantOfEventID(id string) (string, bool) {
	rest, ok := strings.CutPrefix(id, "evt_")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '_')
	if i < 0 || len(rest)-i-1 != 16 || !isLowerHex(rest[i+1:]) {
		return "", false
	}
	tenant := rest[:i]
	if !auth.ValidTenantID(tenant) {
		return "", false
	}
	return tenant, true
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// getArchived answers Get for an event no longer in Redis from the archive
// (the same entry, so the same event), or notFound.
func (s *Service) getArchived(ctx context.Context, f filter, id string, notFound error) (*cyclesv1.GetEventResponse, error) {
	if s.opts.ArchivedEvent == nil {
		return nil, notFound
	}
	row, ok, err := s.opts.ArchivedEvent(ctx, f.tenant, id)
	if err != nil {
		return nil, archiveUnavailable(fmt.Errorf("find event %s of tenant %s in the archive: %w", id, f.tenant, err))
	}
	if !ok {
		return nil, notFound
	}
	e := entryOfRow(row)
	sid, err := ParseID(e.ID)
	if err != nil {
		return nil, err
	}
	ev := toEvent(f.tenant, e, sid)
	if !f.match(ev) {
		return nil, notFound
	}
	return &cyclesv1.GetEventResponse{Event: ev}, nil
}

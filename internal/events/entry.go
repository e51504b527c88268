package events

import cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"

// EventOfEntry is the wire envelope of one entry of tenant's event stream
// that another package's script read (the admin overview's recent denials
// and expiries): the same conversion the listings use, so an event reads
// the same wherever it is served. streamID is the entry's stream id (its
// cursor); one that does not parse leaves the cursor empty.
func EventOfEntry(tenant, streamID string, fields map[string]string) *cyclesv1.Event {
	e := entry{ID: streamID, F: fields}
	if id, err := ParseID(streamID); err == nil {
		return toEvent(tenant, e, id)
	}
	return buildEvent(tenant, e)
}

package events

import "github.com/cyclesgo/cycles-go/internal/apierr"

// MaxCorrelationIDLen bounds the correlation_id filter of ListEvents. The
// ids cyclesd writes are far shorter (docs/protocol.md#correlation-ids): a
// hashed id is 36 bytes, a bulk or cascade id names a tenant (64 bytes at
// most), an action and a request id (64).
const MaxCorrelationIDLen = 256

// correlationFilter checks the correlation_id of a listing: "" keeps every
// event, anything else only the events carrying exactly that id.
func correlationFilter(id string) (string, error) {
	if len(id) > MaxCorrelationIDLen {
		return "", apierr.Invalid("correlation_id", "must be at most %d characters", MaxCorrelationIDLen)
	}
	return id, nil
}

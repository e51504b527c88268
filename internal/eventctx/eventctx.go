// Package eventctx builds the event context that every event-emitting script
// takes as one ARGV (emit_event in lua/lib/core.lua): who acted, the request
// and trace ids, the stream retention and a fresh id base. It is a leaf: the
// domain packages whose scripts emit events (ledger, admin, sweeper,
// ledgerops) use it without depending on internal/events, which reads the streams.
package eventctx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/reqctx"
)

// DefaultRetention is how long events stay in a tenant's stream.
const DefaultRetention = 7 * 24 * time.Hour

// Emission is the event context every event-emitting script receives as one
// ARGV (see event_emitter in lua/lib/core.lua).
type Emission struct {
	Base        string `json:"base"`
	RetentionMs int64  `json:"retention_ms"`
	Actor       string `json:"actor"`
	KeyID       string `json:"key_id"`
	RequestID   string `json:"request_id"`
	TraceID     string `json:"trace_id"`
}

// Arg builds the event-context ARGV of one script call from the request
// context: actor from the principal (system when there is none), request and
// trace ids, and a fresh random id base.
func Arg(ctx context.Context, retention time.Duration) string {
	if retention <= 0 {
		retention = DefaultRetention
	}
	var b [7]byte
	_, _ = rand.Read(b[:])
	e := Emission{Base: hex.EncodeToString(b[:]), RetentionMs: retention.Milliseconds(), Actor: "system",
		RequestID: reqctx.RequestID(ctx), TraceID: reqctx.TraceID(ctx)}
	if p, ok := auth.FromContext(ctx); ok {
		switch {
		case p.Admin:
			e.Actor = "admin"
		case p.Tenant != "":
			e.Actor, e.KeyID = "api_key", p.KeyID
		}
	}
	out, _ := json.Marshal(e)
	return string(out)
}

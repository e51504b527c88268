package script

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/defaults"
)

// Publish sends msg on a Redis pub/sub channel (every replica listening with
// Listen receives it). Pub/sub is fire-and-forget: a receiver that is
// disconnected misses the message, which Listen reports as a gap.
func (e *Executor) Publish(ctx context.Context, channel, msg string) error {
	if e.callTimeout > 0 {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, e.callTimeout)
			defer cancel()
		}
	}
	if err := e.client.Publish(ctx, channel, msg).Err(); err != nil {
		return classify("publish "+channel, err)
	}
	return nil
}

// Listener receives a channel's messages (Listen).
type Listener struct {
	// Message is called with each message's payload, on Listen's goroutine.
	Message func(payload string)
	// Gap is called whenever messages may have been missed: after every
	// (re)subscription that follows a broken connection, and on the first
	// subscription (a receiver is only as fresh as its subscription). The
	// receiver must then drop what the missed messages would have dropped.
	Gap func()
	// Retry is the pause after a broken connection (0 = 200 ms).
	Retry time.Duration
}

// pingEvery is how long Listen waits on a quiet channel before it checks
// the connection with a PING.
const pingEvery = 2 * time.Second

// Listen subscribes to channel on a connection of its own (not one of the
// pool's) and delivers its messages to l until ctx ends, reconnecting after
// any failure; each reconnection is reported to l.Gap. It returns nil when
// ctx ends.
func (e *Executor) Listen(ctx context.Context, channel string, l Listener) error {
	retry := l.Retry
	defaults.Set(&retry, 200*time.Millisecond)
	ps := e.client.Subscribe(ctx, channel)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		// Closing unblocks a Receive in progress at shutdown.
		select {
		case <-ctx.Done():
		case <-stop:
		}
		_ = ps.Close()
	}()
	for {
		m, err := ps.ReceiveTimeout(ctx, pingEvery)
		if ctx.Err() != nil {
			return nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			// Quiet channel: a ping proves the connection (a dead one is
			// replaced, and the resubscription reported as a gap).
			_ = ps.Ping(ctx)
			continue
		}
		if err != nil {
			// The connection broke: the next Receive dials again and
			// resubscribes; that subscription is reported as a gap.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(retry):
			}
			continue
		}
		switch v := m.(type) {
		case *redis.Subscription:
			if v.Kind == "subscribe" && l.Gap != nil {
				l.Gap()
			}
		case *redis.Message:
			if l.Message != nil {
				l.Message(v.Payload)
			}
		case *redis.Pong:
		default:
			return fmt.Errorf("listen %s: unexpected %T", channel, m)
		}
	}
}

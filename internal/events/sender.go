package events

import (
	"context"
	"strconv"
	"sync"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// ReasonSlowConsumer is the ErrorInfo reason of a watch cut off because its
// client stopped reading (gRPC RESOURCE_EXHAUSTED): resume from the last
// cursor received.
const ReasonSlowConsumer = apierr.SlowConsumer

// sender decouples reading from the client's pace with a bounded buffer:
// messages go to a goroutine that sends them (gRPC flow control blocks it
// when the client does not read). When the buffer stays full for
// SendStall, the watch ends with SLOW_CONSUMER instead of holding the
// stream forever. Memory: at most SendBuffer messages plus the one in
// flight in gRPC.
type sender struct {
	ch     chan *cyclesv1.WatchEventsResponse
	fail   chan error
	stop   chan struct{}
	done   chan struct{}
	stall  time.Duration
	buffer int
	ctx    context.Context
	once   sync.Once
	cutOff bool
}

func (s *Service) newSender(ctx context.Context, send func(*cyclesv1.WatchEventsResponse) error) *sender {
	o := &sender{
		ch: make(chan *cyclesv1.WatchEventsResponse, s.opts.SendBuffer), fail: make(chan error, 1),
		stop: make(chan struct{}), done: make(chan struct{}), stall: s.opts.SendStall, buffer: s.opts.SendBuffer, ctx: ctx,
	}
	go func() {
		defer close(o.done)
		for {
			select {
			case <-o.stop:
				return
			case m := <-o.ch:
				select {
				case <-o.stop:
					return // never send once the handler is returning
				default:
				}
				if err := send(m); err != nil {
					o.fail <- err
					return
				}
			}
		}
	}()
	return o
}

// send queues m; it fails when the client has not taken anything for the
// stall period with the buffer full, or when an earlier send failed.
func (o *sender) send(m *cyclesv1.WatchEventsResponse) error {
	select {
	case o.ch <- m:
		return nil
	case err := <-o.fail:
		return sendErr(o.ctx, err)
	default:
	}
	t := time.NewTimer(o.stall)
	defer t.Stop()
	select {
	case o.ch <- m:
		return nil
	case err := <-o.fail:
		return sendErr(o.ctx, err)
	case <-o.ctx.Done():
		return nil
	case <-t.C:
		o.cutOff = true
		return apierr.New(apierr.SlowConsumer,
			"the client read nothing for %s with %d messages buffered: resume from the last cursor received", o.stall, o.buffer).
			With("buffer", strconv.Itoa(o.buffer)).With("stall_ms", strconv.FormatInt(o.stall.Milliseconds(), 10))
	}
}

// failed delivers the error of a failed send.
func (o *sender) failed() <-chan error { return o.fail }

// close lets what is buffered go out first (bounded by the stall period),
// so events read before an error reach the client ahead of the final
// status, then stops the goroutine. After a cut-off it does not wait: the
// blocked send returns when gRPC ends the stream.
func (o *sender) close() {
	o.once.Do(func() {
		deadline := time.Now().Add(o.stall)
	drain:
		for len(o.ch) > 0 && !o.cutOff && o.ctx.Err() == nil && time.Now().Before(deadline) {
			select {
			case <-o.done:
				break drain
			case <-time.After(time.Millisecond):
			}
		}
		close(o.stop)
		if o.cutOff {
			return
		}
		select {
		case <-o.done:
		case <-time.After(time.Until(deadline)):
		}
	})
}

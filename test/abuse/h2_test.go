package abuse

import (
	"bytes"
	"context"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Client is a raw HTTP/2 client (golang.org/x/net/http2 framers) that can
// do what a well-behaved client never does: stall a body mid-message, flood
// HEADERS, never read.
type h2Client struct {
	c    net.Conn
	fr   *http2.Framer
	wmu  sync.Mutex
	henc *hpack.Encoder
	hbuf bytes.Buffer
	next uint32
	addr string

	// Flow control, learnt by read (when the client reads).
	fmu        sync.Mutex
	cond       *sync.Cond
	connWin    int64
	initWin    int64
	streamWins map[uint32]int64
	closed     bool
	resets     int
}

// dialH2 connects and sends the client preface and SETTINGS.
func dialH2(ctx context.Context, addr string) (*h2Client, error) {
	c, err := DialAttacker(ctx, addr)
	if err != nil {
		return nil, err
	}
	h := &h2Client{c: c, fr: http2.NewFramer(c, c), next: 1, addr: addr, connWin: 65535, initWin: 65535, streamWins: map[uint32]int64{}}
	h.cond = sync.NewCond(&h.fmu)
	h.henc = hpack.NewEncoder(&h.hbuf)
	h.fr.SetMaxReadFrameSize(1 << 20)
	_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		c.Close()
		return nil, err
	}
	if err := h.fr.WriteSettings(); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Time{})
	// Closing the connection ends every blocked read and write.
	context.AfterFunc(ctx, func() { h.Close() })
	return h, nil
}

// Close closes the connection.
func (h *h2Client) Close() {
	_ = h.c.Close()
	h.fmu.Lock()
	h.closed = true
	h.cond.Broadcast()
	h.fmu.Unlock()
}

// read consumes frames until the connection ends, tracking flow-control
// windows and acknowledging SETTINGS and PINGs; it returns the error that
// ended it.
func (h *h2Client) read() error {
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.Close()
			return err
		}
		h.fmu.Lock()
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					delta := int64(v) - h.initWin
					h.initWin = int64(v)
					for id := range h.streamWins {
						h.streamWins[id] += delta
					}
				}
				h.fmu.Unlock()
				h.wmu.Lock()
				_ = h.fr.WriteSettingsAck()
				h.wmu.Unlock()
				h.fmu.Lock()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.fmu.Unlock()
				h.wmu.Lock()
				_ = h.fr.WritePing(true, f.Data)
				h.wmu.Unlock()
				h.fmu.Lock()
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				h.connWin += int64(f.Increment)
			} else if _, ok := h.streamWins[f.StreamID]; ok {
				h.streamWins[f.StreamID] += int64(f.Increment)
			}
		case *http2.RSTStreamFrame:
			h.resets++
			delete(h.streamWins, f.StreamID)
		}
		h.cond.Broadcast()
		h.fmu.Unlock()
	}
}

// headers opens a stream to path (a gRPC POST) and returns its id; extra are
// more header name/value pairs.
func (h *h2Client) headers(path string, endStream bool, extra ...string) (uint32, error) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.hbuf.Reset()
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", h.addr},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = h.henc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	for i := 0; i+1 < len(extra); i += 2 {
		_ = h.henc.WriteField(hpack.HeaderField{Name: extra[i], Value: extra[i+1]})
	}
	id := h.next
	h.next += 2
	h.fmu.Lock()
	h.streamWins[id] = h.initWin
	h.fmu.Unlock()
	return id, h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndStream: endStream, EndHeaders: true})
}

// data sends p on stream id within the flow-control windows (waiting for
// WINDOW_UPDATEs, which read must be consuming).
func (h *h2Client) data(id uint32, p []byte, end bool) error {
	for len(p) > 0 || end {
		h.fmu.Lock()
		for !h.closed && len(p) > 0 && (h.connWin <= 0 || h.streamWins[id] <= 0) {
			if _, ok := h.streamWins[id]; !ok {
				h.fmu.Unlock()
				return errStreamReset
			}
			h.cond.Wait()
		}
		if h.closed {
			h.fmu.Unlock()
			return net.ErrClosed
		}
		n := min(int64(len(p)), h.connWin, h.streamWins[id], 16<<10)
		h.connWin -= n
		h.streamWins[id] -= n
		h.fmu.Unlock()
		last := end && int(n) == len(p)
		h.wmu.Lock()
		err := h.fr.WriteData(id, last, p[:n])
		h.wmu.Unlock()
		if err != nil {
			return err
		}
		p = p[n:]
		if last || (end && len(p) == 0) {
			return nil
		}
	}
	return nil
}

type errString string

func (e errString) Error() string { return string(e) }

const errStreamReset = errString("stream reset")

// grpcFrame is a gRPC message prefix declaring n bytes, followed by body.
func grpcFrame(n int, body []byte) []byte {
	b := []byte{0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	return append(b, body...)
}

package abuse

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHTTPBodySlowloris: issue 23 bug 3. Requests to the Cycles HTTP wire
// with no key and a Content-Length whose body is trickled, one byte every
// 500 ms, from more connections than -http-max-connections (64 here).
// Before: no answer at all (net/http drained the body before writing the
// 401) and the connections were held until the slots ran out, so /healthz
// on a new connection timed out. Now the 401 comes from the headers and the
// connection closes without reading the body.
func TestHTTPBodySlowloris(t *testing.T) {
	d := Start(t, "-http-max-connections", "64")
	var answered, unanswered int
	var mu sync.Mutex
	d.UnderAttack(t, Attack{Name: "HTTP body slowloris", Duration: 3 * time.Second, Run: func(ctx context.Context) {
		var wg sync.WaitGroup
		for range 96 {
			wg.Go(func() {
				got := trickle(ctx, d.HTTPAddr)
				mu.Lock()
				defer mu.Unlock()
				if got != 0 {
					answered++
				} else {
					unanswered++
				}
			})
		}
		wg.Wait()
	}})
	t.Logf("slowloris connections: %d answered, %d never answered", answered, unanswered)
	if unanswered > 0 {
		t.Errorf("%d trickled requests were never answered", unanswered)
	}
	if n := d.Metric(t, "cycles_conn_limit_closures_total", `reason="http_unread_body"`); n == 0 {
		t.Errorf("no http_unread_body closure counted")
	}
}

// trickle sends a keyless POST declaring a 1,000-byte body and trickles it
// until an answer comes or ctx ends; it returns the answer's status (0:
// none).
func trickle(ctx context.Context, addr string) int {
	c, err := DialAttacker(ctx, addr)
	if err != nil {
		return 0
	}
	defer c.Close()
	context.AfterFunc(ctx, func() { _ = c.Close() })
	if _, err := c.Write([]byte("POST /v1/reservations HTTP/1.1\r\nHost: cyclesd\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")); err != nil {
		return 0
	}
	status := make(chan int, 1)
	go func() {
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			status <- 0
			return
		}
		res.Body.Close()
		status <- res.StatusCode
	}()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case s := <-status:
			return s
		case <-ctx.Done():
			_ = c.Close()
			return <-status
		case <-tick.C:
			_, _ = c.Write([]byte(" "))
		}
	}
}

// TestHTTPBodyLimitsAnswerInJSON: a declared body over the limit is 400
// INVALID_REQUEST in the Cycles error body, before any of it is read.
func TestHTTPBodyLimitsAnswerInJSON(t *testing.T) {
	d := Start(t)
	key := d.Tenant(t, "json").Key
	// Only the headers are sent: the answer must come before any of the
	// declared 2 MiB body. (A client still writing the body when the
	// server answers and closes may see a reset instead of the answer, as
	// the server does not drain it: so the test sends none.)
	conn, err := net.DialTimeout("tcp", d.HTTPAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /v1/reservations HTTP/1.1\r\nHost: %s\r\nX-Cycles-API-Key: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", d.HTTPAddr, key, 2<<20)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b := new(strings.Builder)
	_, _ = bufio.NewReader(res.Body).WriteTo(b)
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(b.String(), `"error":"INVALID_REQUEST"`) ||
		!strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("over-limit body: %s %s %s", res.Status, res.Header.Get("Content-Type"), b)
	}
}

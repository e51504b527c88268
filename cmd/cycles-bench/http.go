package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// The http-reserve phase drives the same reserve as the reserve phase over
// the Cycles HTTP/JSON wire (POST /v1/reservations, docs/http-api.md), so its
// cell's server CPU per op sits next to gRPC's. Clients share one keep-alive
// HTTP/1.1 client, as an SDK process would.

func newHTTPClient(clients int) *http.Client {
	return &http.Client{
		Timeout: callLimit,
		Transport: &http.Transport{
			MaxIdleConns:        clients + 8,
			MaxIdleConnsPerHost: clients + 8,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
}

// reserveJSON writes the reserve request of req as the protocol's JSON.
func reserveJSON(buf *bytes.Buffer, req *cyclesv1.CreateReservationRequest) {
	s := req.GetSubject()
	buf.WriteString(`{"idempotency_key":`)
	writeJSONString(buf, req.GetIdempotencyKey())
	buf.WriteString(`,"subject":{`)
	sep := ""
	for _, f := range [][2]string{{"workspace", s.GetWorkspace()}, {"agent", s.GetAgent()}} {
		if f[1] == "" {
			continue
		}
		buf.WriteString(sep + `"` + f[0] + `":`)
		writeJSONString(buf, f[1])
		sep = ","
	}
	buf.WriteString(`},"action":{"kind":`)
	writeJSONString(buf, req.GetAction().GetKind())
	buf.WriteString(`,"name":`)
	writeJSONString(buf, req.GetAction().GetName())
	buf.WriteString(`},"estimate":{"unit":"TOKENS","amount":`)
	buf.WriteString(strconv.FormatInt(req.GetEstimate().GetAmount(), 10))
	buf.WriteString(`},"ttl_ms":`)
	buf.WriteString(strconv.FormatInt(req.GetTtlMs(), 10))
	buf.WriteString(`}`)
}

func writeJSONString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s)
	buf.Write(b)
}

// httpError turns a protocol error body into the gRPC status the phases
// count and classify (errorCode, ambiguous), keeping its code.
func httpError(status int, body []byte) error {
	var e struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error == "" {
		return fmt.Errorf("HTTP %d: %.200s", status, body)
	}
	code := apierr.Code(e.Error)
	if status == http.StatusServiceUnavailable {
		code = apierr.Unavailable
	}
	return (&apierr.Error{Code: code, Message: e.Message}).Status("", "").Err()
}

func (g *group) opHTTPReserve(ctx context.Context, w int) (string, error) {
	req := g.reserveReq(w)
	var buf bytes.Buffer
	reserveJSON(&buf, req)
	cctx, cancel := context.WithTimeout(ctx, callLimit)
	defer cancel()
	hreq, err := http.NewRequestWithContext(cctx, http.MethodPost, g.b.httpBase+"/v1/reservations", &buf)
	if err != nil {
		return "", err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("X-Cycles-API-Key", g.key)
	hreq.Header.Set("X-Idempotency-Key", req.GetIdempotencyKey())
	wl := g.workers[w]
	resp, err := g.b.httpClient.Do(hreq)
	if err != nil {
		wl.pending = append(wl.pending, pendingCall{reserve: req}) // the response was lost
		return "", err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		wl.pending = append(wl.pending, pendingCall{reserve: req})
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		err := httpError(resp.StatusCode, body)
		if ambiguous(err) {
			wl.pending = append(wl.pending, pendingCall{reserve: req})
		}
		return "", err
	}
	wl.reserved += estimate
	return "", nil
}

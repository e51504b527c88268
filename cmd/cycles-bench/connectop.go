package main

import (
	"context"
	"errors"
	"net/http"
	"time"

	"connectrpc.com/connect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
)

// The "connect" op is the reserve op sent as Connect JSON over HTTP/1.1 to
// the HTTP listener, where the vanguard transcoder hands it to the same gRPC
// server: its cells put the transcoding cost (JSON, HTTP/1.1, the in-process
// hop) per op next to the native gRPC reserve cells.
type connectReserver = connect.Client[cyclesv1.CreateReservationRequest, cyclesv1.CreateReservationResponse]

// newConnectReserver builds the Connect JSON client of one group; its HTTP
// client keeps one keep-alive connection per worker.
func newConnectReserver(baseURL string, clients int) *connectReserver {
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns: clients, MaxIdleConnsPerHost: clients, IdleConnTimeout: time.Minute,
	}}
	return connect.NewClient[cyclesv1.CreateReservationRequest, cyclesv1.CreateReservationResponse](
		hc, baseURL+"/cycles.v1.RuntimeService/CreateReservation", connect.WithProtoJSON())
}

func (g *group) opConnectReserve(ctx context.Context, w int) (string, error) {
	if g.cj == nil {
		return "", errors.New("connect op without an HTTP listener")
	}
	req := g.reserveReq(w)
	cctx, cancel := context.WithTimeout(ctx, callLimit)
	defer cancel()
	creq := connect.NewRequest(req)
	creq.Header().Set(auth.APIKeyHeader, g.key)
	_, err := g.cj.CallUnary(cctx, creq)
	wl := g.workers[w]
	if err != nil {
		// Same rule as gRPC: only a definite refusal is known not to apply;
		// anything else is retried with its key before the ledger check.
		switch connect.CodeOf(err) {
		case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeAlreadyExists,
			connect.CodeNotFound, connect.CodePermissionDenied, connect.CodeUnauthenticated, connect.CodeResourceExhausted:
		default:
			wl.pending = append(wl.pending, pendingCall{reserve: req})
		}
		return "", err
	}
	wl.reserved += estimate
	return "", nil
}

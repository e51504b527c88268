package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Invoke runs one unary call in process through the same interceptor chain a
// gRPC call goes through (request id, logging, status mapping, recovery,
// deadline, auth, rate-limit guard, validation), then h. Transports on the
// HTTP listener call it, so auth, validation, throttling and logs stay one
// path whatever the wire.
//
// md is the caller's metadata (lowercase keys, as gRPC carries them). It
// returns h's response, the response header the chain set (x-request-id,
// x-cycles-trace-id, rate-limit headers), and the error as the gRPC status a
// gRPC client would see (ErrorInfo included).
func (s *Server) Invoke(ctx context.Context, fullMethod string, md metadata.MD, req any, h grpc.UnaryHandler) (any, metadata.MD, error) {
	st := &headerStream{method: fullMethod}
	ctx = grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(ctx, md), st)
	info := &grpc.UnaryServerInfo{FullMethod: fullMethod}
	resp, err := s.runChain(ctx, req, info, h, 0)
	return resp, st.header, err
}

func (s *Server) runChain(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler, i int) (any, error) {
	if i == len(s.unary) {
		return h(ctx, req)
	}
	return s.unary[i](ctx, req, info, func(ctx context.Context, req any) (any, error) {
		return s.runChain(ctx, req, info, h, i+1)
	})
}

// headerStream collects the headers the chain sets with grpc.SetHeader.
type headerStream struct {
	method string
	header metadata.MD
}

func (h *headerStream) Method() string { return h.method }

func (h *headerStream) SetHeader(md metadata.MD) error {
	if h.header == nil {
		h.header = make(metadata.MD, len(md))
	}
	for k, v := range md {
		h.header[k] = append(h.header[k], v...)
	}
	return nil
}

func (h *headerStream) SendHeader(md metadata.MD) error { return h.SetHeader(md) }

func (h *headerStream) SetTrailer(metadata.MD) error { return nil }

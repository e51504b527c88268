// Package bufnet dials in-memory gRPC listeners (grpc/test/bufconn) in tests.
// It stands apart from grpctest, which imports internal/server, so that the
// server's own tests dial the same way.
package bufnet

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// Dial is a client connection to lis, closed when tb ends.
func Dial(tb testing.TB, lis *bufconn.Listener) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

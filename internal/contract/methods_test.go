package contract

import (
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Methods names each RPC as gRPC does, once, and stops when asked to.
func TestMethodsWalksEveryRPCOnce(t *testing.T) {
	seen := map[string]bool{}
	for full, md := range Methods() {
		if seen[full] {
			t.Fatalf("%s yielded twice", full)
		}
		seen[full] = true
		if want := "/" + string(md.Parent().FullName()) + "/" + string(md.Name()); full != want {
			t.Fatalf("name %q, want %q", full, want)
		}
	}
	for _, m := range []string{cyclesv1.RuntimeService_CreateReservation_FullMethodName, cyclesv1.AuthService_Introspect_FullMethodName} {
		if !seen[m] {
			t.Errorf("%s not yielded (%d methods seen)", m, len(seen))
		}
	}
	n := 0
	for range Methods() {
		n++
		if n == 2 {
			break
		}
	}
	if n != 2 {
		t.Fatalf("break after 2 went on to %d", n)
	}
}

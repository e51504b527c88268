package events

import (
	"testing"
	"time"
)

// The replay budget: a stream that reads more than its rate waits in
// proportion; streams of one tenant share the tenant's rate; other tenants
// are not charged; a tenant's bucket lives only while it has open streams.
func TestPacerBudgets(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	p := newPacer(1000, 2000, 100, clock)

	a1 := p.open("a")
	for _, tc := range []struct {
		name string
		s    *streamPace
		n    int
		want time.Duration
	}{
		{"within the stream's burst", a1, 100, 0},
		{"over the stream's rate", a1, 100, 100 * time.Millisecond},
		{"nothing read costs nothing", a1, 0, 0},
	} {
		if got := tc.s.charge(tc.n); got != tc.want {
			t.Fatalf("%s: wait %v, want %v", tc.name, got, tc.want)
		}
	}

	// Time pays the debt back at the stream's rate.
	now = now.Add(time.Second)
	if got := a1.charge(100); got != 0 {
		t.Fatalf("after a second: wait %v", got)
	}

	// The tenant bucket (burst 200, 2000/s) is shared: a second stream of a
	// tenant that already read 200 within the burst waits for the tenant.
	now = now.Add(time.Hour)
	a2, a3 := p.open("a"), p.open("a")
	if got := a2.charge(100); got != 0 {
		t.Fatalf("a2: %v", got)
	}
	if got := a3.charge(100); got != 0 {
		t.Fatalf("a3: %v", got)
	}
	if got := a2.charge(100); got != 100*time.Millisecond { // stream 1000/s: 100 ms; tenant 2000/s: 50 ms
		t.Fatalf("a2 over both: %v", got)
	}
	if got := a3.charge(100); got != 100*time.Millisecond {
		t.Fatalf("a3 over both: %v", got)
	}
	if got := a1.charge(100); got != 150*time.Millisecond { // its own bucket is full; the tenant owes 300
		t.Fatalf("a1 behind its tenant: %v", got)
	}
	// Another tenant is not charged for a's reads.
	b := p.open("b")
	if got := b.charge(100); got != 0 {
		t.Fatalf("tenant b waits %v for tenant a", got)
	}

	for _, s := range []*streamPace{a1, a2, a3, b} {
		s.close()
	}
	if len(p.tenants) != 0 {
		t.Fatalf("%d tenant buckets left after every stream closed", len(p.tenants))
	}
}

// A negative rate is unlimited.
func TestPacerUnlimited(t *testing.T) {
	p := newPacer(-1, -1, 10, time.Now)
	s := p.open("a")
	defer s.close()
	for range 100 {
		if d := s.charge(1000); d != 0 {
			t.Fatalf("unlimited pacer waits %v", d)
		}
	}
}

// A read is paid in advance for a full batch; the unread part comes back.
func TestPacerRefund(t *testing.T) {
	now := time.Unix(0, 0)
	p := newPacer(1000, 1000, 100, func() time.Time { return now })
	s := p.open("a")
	defer s.close()
	for range 10 { // an idle live stream: every read returns nothing
		if d := s.charge(100); d != 0 {
			t.Fatalf("idle stream waits %v", d)
		}
		s.refund(100)
	}
	if d := s.charge(100); d != 0 {
		t.Fatalf("after refunds: %v", d)
	}
	if d := s.charge(100); d != 100*time.Millisecond {
		t.Fatalf("unrefunded batch: %v", d)
	}
}

package defaults

import (
	"testing"
	"time"
)

func TestSetAndCap(t *testing.T) {
	tests := []struct {
		name    string
		in, def time.Duration
		limit   time.Duration
		want    time.Duration
	}{
		{"zero takes the default", 0, time.Second, time.Minute, time.Second},
		{"negative takes the default", -5, time.Second, time.Minute, time.Second},
		{"set stays", 3 * time.Second, time.Second, time.Minute, 3 * time.Second},
		{"above the limit is capped", time.Hour, time.Second, time.Minute, time.Minute},
		{"a default above the limit is capped too", 0, time.Hour, time.Minute, time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.in
			Set(&v, tc.def)
			Cap(&v, tc.limit)
			if v != tc.want {
				t.Fatalf("got %v, want %v", v, tc.want)
			}
		})
	}
}

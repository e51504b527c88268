package defaults

import (
	"testing"
	"time"
)

type fillInner struct {
	Rate  float64
	Burst int `defaults:"keep-negative"`
}

type fillOpts struct {
	Timeout time.Duration
	Size    int64
	Streams uint32
	Flood   int `defaults:"keep-negative"`
	Inner   fillInner
	Name    string
	hidden  int
}

func TestFill(t *testing.T) {
	def := fillOpts{Timeout: time.Second, Size: 64, Streams: 8, Flood: 2, Inner: fillInner{Rate: 1.5, Burst: 20}, Name: "def", hidden: 7}
	tests := []struct {
		name    string
		in, out fillOpts
	}{
		{"zero takes every default but strings and unexported fields", fillOpts{},
			fillOpts{Timeout: time.Second, Size: 64, Streams: 8, Flood: 2, Inner: fillInner{Rate: 1.5, Burst: 20}}},
		{"negative takes the default", fillOpts{Timeout: -1, Size: -5, Inner: fillInner{Rate: -1}},
			fillOpts{Timeout: time.Second, Size: 64, Streams: 8, Flood: 2, Inner: fillInner{Rate: 1.5, Burst: 20}}},
		{"keep-negative keeps a negative value", fillOpts{Flood: -1, Inner: fillInner{Burst: -1}},
			fillOpts{Timeout: time.Second, Size: 64, Streams: 8, Flood: -1, Inner: fillInner{Rate: 1.5, Burst: -1}}},
		{"set values stay", fillOpts{Timeout: time.Minute, Size: 1, Streams: 1, Flood: 9, Inner: fillInner{Rate: 0.5, Burst: 3}, Name: "x", hidden: 1},
			fillOpts{Timeout: time.Minute, Size: 1, Streams: 1, Flood: 9, Inner: fillInner{Rate: 0.5, Burst: 3}, Name: "x", hidden: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in
			Fill(&got, def)
			if got != tc.out {
				t.Fatalf("got %+v, want %+v", got, tc.out)
			}
		})
	}
}

package main

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSettleWaitsForMemoryToHoldStill(t *testing.T) {
	errRead := errors.New("INFO refused")
	tests := []struct {
		name      string
		reads     []int64 // the figures read in turn (the last repeats)
		failAt    int     // a read that fails (-1: none)
		want      int64
		wantReads int
		wantErr   error
	}{
		{"still at once", []int64{500, 500}, -1, 500, 2, nil},
		// The figure dropped after the first read (a grown table's old one
		// freed, say).
		{"old table freed", []int64{1000, 800, 800}, -1, 800, 3, nil},
		{"grows, then holds", []int64{100, 200, 300, 300}, -1, 300, 4, nil},
		{"a failed read", []int64{100, 200}, 1, 0, 2, errRead},
	}
	for _, tt := range tests {
		n := 0
		read := func() (int64, error) {
			i := min(n, len(tt.reads)-1)
			n++
			if n-1 == tt.failAt {
				return 0, errRead
			}
			return tt.reads[i], nil
		}
		got, err := settle(context.Background(), read, time.Millisecond, time.Second)
		if got != tt.want || !errors.Is(err, tt.wantErr) || n != tt.wantReads {
			t.Errorf("%s: settle = %d, %v after %d reads; want %d, %v after %d", tt.name, got, err, n, tt.want, tt.wantErr, tt.wantReads)
		}
	}
	// A figure that never holds still: the last read once the time is up.
	n := int64(0)
	got, err := settle(context.Background(), func() (int64, error) { n++; return n, nil }, time.Millisecond, 20*time.Millisecond)
	if err != nil || got != n || n < 3 {
		t.Errorf("never still: settle = %d, %v after %d reads; want the last read", got, err, n)
	}
}

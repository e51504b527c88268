package bulk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// fakeTenants serves n tenants named t0..t(n-1) in pages of size, with the
// cursor being the index of the next row; it records the cursors it saw.
type fakeTenants struct {
	n, size int
	cursors []string
	fail    error
}

func (f *fakeTenants) list(_ context.Context, cursor string) (*cyclesv1.ListTenantsResponse, error) {
	f.cursors = append(f.cursors, cursor)
	if f.fail != nil {
		return nil, f.fail
	}
	from := 0
	if cursor != "" {
		from, _ = strconv.Atoi(cursor)
	}
	to := min(from+f.size, f.n)
	l := &cyclesv1.ListTenantsResponse{HasMore: to < f.n}
	for i := from; i < to; i++ {
		l.Tenants = append(l.Tenants, &cyclesv1.Tenant{TenantId: fmt.Sprintf("t%d", i)})
	}
	if l.HasMore {
		l.NextCursor = strconv.Itoa(to)
	}
	return l, nil
}

func TestCollect(t *testing.T) {
	even := func(tn *cyclesv1.Tenant) bool {
		i, _ := strconv.Atoi(tn.GetTenantId()[1:])
		return i%2 == 0
	}
	boom := errors.New("listing down")
	for _, tc := range []struct {
		name        string
		src         fakeTenants
		keep        func(*cyclesv1.Tenant) bool
		wantRows    int
		wantCursors []string
		wantErr     error
		wantInvalid bool
	}{
		{name: "empty", src: fakeTenants{n: 0, size: 3}, wantRows: 0, wantCursors: []string{""}},
		{name: "walks every page with the cursor", src: fakeTenants{n: 7, size: 3}, wantRows: 7, wantCursors: []string{"", "3", "6"}},
		{name: "keep filters rows", src: fakeTenants{n: 7, size: 3}, keep: even, wantRows: 4, wantCursors: []string{"", "3", "6"}},
		{name: "stops past MaxRows", src: fakeTenants{n: MaxRows * 3, size: MaxRows}, wantRows: MaxRows * 2,
			wantCursors: []string{"", strconv.Itoa(MaxRows)}},
		{name: "listing error", src: fakeTenants{n: 5, size: 2, fail: boom}, wantErr: boom, wantCursors: []string{""}},
		{name: "too many pages", src: fakeTenants{n: maxPages * 2, size: 1}, keep: func(*cyclesv1.Tenant) bool { return false },
			wantInvalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.src
			rows, err := collect(context.Background(), "tenants", src.list, (*cyclesv1.ListTenantsResponse).GetTenants, tc.keep)
			switch {
			case tc.wantInvalid:
				e, ok := apierr.As(err)
				if !ok || e.Code != apierr.InvalidRequest || e.Details["field"] != "filter" {
					t.Fatalf("err = %v, want INVALID_REQUEST on filter", err)
				}
				if len(src.cursors) != maxPages {
					t.Fatalf("listed %d pages, want exactly maxPages=%d", len(src.cursors), maxPages)
				}
				return
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) || rows != nil {
					t.Fatalf("rows, err = %v, %v; want nil, %v", rows, err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("collect: %v", err)
			}
			if len(rows) != tc.wantRows {
				t.Fatalf("got %d rows, want %d", len(rows), tc.wantRows)
			}
			for _, r := range rows {
				if tc.keep != nil && !tc.keep(r) {
					t.Fatalf("row %s was kept though keep refuses it", r.GetTenantId())
				}
			}
			if !slices.Equal(src.cursors, tc.wantCursors) {
				t.Fatalf("cursors = %q, want %q", src.cursors, tc.wantCursors)
			}
		})
	}
}

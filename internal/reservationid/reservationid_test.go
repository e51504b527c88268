package reservationid

import "testing"

func TestNewAndOwner(t *testing.T) {
	id := New("acme", "0190b7c2-6d1e-4cc4-8a3e-1b2c3d4e5f60")
	if id != "r_acme_0190b7c26d1e4cc48a3e1b2c3d4e5f60" {
		t.Fatalf("id %q", id)
	}
	cases := []struct {
		id, owner string
		ok        bool
	}{
		{id, "acme", true},
		{"r_a_b_0190b7c26d1e4cc48a3e1b2c3d4e5f60", "a_b", true},
		{"x_acme_0190b7c26d1e4cc48a3e1b2c3d4e5f60", "", false}, // prefix
		{"r_acme_0190b7c26d1e4cc48a3e1b2c3d4e5f6", "", false},  // 31 hex
		{"r_acme-0190b7c26d1e4cc48a3e1b2c3d4e5f60", "", false}, // separator
		{"r_acme_0190B7C26D1E4CC48A3E1B2C3D4E5F60", "", false}, // upper-case hex
		{"r__0190b7c26d1e4cc48a3e1b2c3d4e5f60", "", false},     // no tenant
		{"", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			owner, ok := Owner(tc.id)
			if owner != tc.owner || ok != tc.ok {
				t.Fatalf("Owner(%q) = %q, %v; want %q, %v", tc.id, owner, ok, tc.owner, tc.ok)
			}
		})
	}
}

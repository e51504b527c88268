package validate

import (
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Every AdminService request type has exactly one validator (duplicates panic
// at init), so no admin RPC can skip validation.
func TestEveryAdminRequestHasAValidator(t *testing.T) {
	methods := cyclesv1.File_cycles_v1_admin_proto.Services().ByName("AdminService").Methods()
	if methods.Len() != 17 {
		t.Fatalf("AdminService has %d methods, expected 17", methods.Len())
	}
	for i := 0; i < methods.Len(); i++ {
		in := methods.Get(i).Input().FullName()
		if !Has(in) {
			t.Errorf("no validator for %s", in)
		}
	}
}

func TestAdminScopePath(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"tenant:a", true},
		{"tenant:a/workspace:Prod/agent:b-1.x_y", true},
		{"agent:b/tenant:a", true}, // order is checked by scope.Canonical in the domain
		{"", false},
		{"tenant:", false},
		{"tenant:a/", false},
		{"tenant:a//agent:b", false},
		{"tenant:a/team:x", false},
		{"tenant:a/agent:b c", false},
		{"tenant", false},
	} {
		if err := AdminScopePath("scope_path", tc.path); (err == nil) != tc.ok {
			t.Errorf("%q: err = %v, want ok=%v", tc.path, err, tc.ok)
		}
	}
}

package validate

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// wantField asserts Message accepts req when field is "", and otherwise
// refuses it with INVALID_REQUEST naming exactly that field.
func wantField(t *testing.T, req proto.Message, field string) {
	t.Helper()
	err := Message(req)
	if field == "" {
		if err != nil {
			t.Fatalf("valid request refused: %v", err)
		}
		return
	}
	ae, ok := apierr.As(err)
	if !ok || ae.Code != apierr.InvalidRequest || ae.Details["field"] != field {
		t.Fatalf("err %v, want INVALID_REQUEST on %s", err, field)
	}
}

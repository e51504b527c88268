package cycleshttp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// The budget bulk body keeps spent for RESET_SPENT only.
func TestBulkBudgetsSpentOnlyToReset(t *testing.T) {
	for action, keep := range map[string]bool{"RESET_SPENT": true, "CREDIT": false} {
		body := `{"action":"` + action + `","amount":{"unit":"TOKENS","amount":1},"spent":{"unit":"TOKENS","amount":4}}`
		req := &cyclesv1.BulkActionBudgetsRequest{}
		r := httptest.NewRequest(http.MethodPost, "/v1/admin/budgets/bulk-action", strings.NewReader(body))
		err := protoJSON(&API{maxBody: 4096}, httptest.NewRecorder(), r, req)
		if err == nil {
			err = spentOnlyToReset(req)
		}
		if err != nil || (req.Spent != nil) != keep {
			t.Errorf("%s: spent %v (err %v), kept want %v", action, req.Spent, err, keep)
		}
	}
}

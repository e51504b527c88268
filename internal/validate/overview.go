package validate

import cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"

// OverviewService request validators: the snapshot takes no parameters.
func init() {
	register(func(*cyclesv1.GetOverviewRequest) error { return nil })
}

package validate

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// OpsService request validators: the requests have no fields today; they are
// registered so the one validation path covers every RPC.
func init() {
	register(func(*cyclesv1.GetSweeperStatusRequest) error { return nil })
	register(func(*cyclesv1.TriggerSweepRequest) error { return nil })
}

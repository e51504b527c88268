package policy

import "github.com/cyclesgo/cycles-go/internal/script"

// The policy scripts (lua/policy/) with their KEYS and ARGV, in the order
// and under the names of each script's header. The quota counters
// themselves are written by the reserve script (lua/lib/quota.lua).
var (
	scriptCreate       = script.Bind[policyKeys, createArgs]("policy/create", script.Returns[stored]())
	scriptUpdate       = script.Bind[policyKeys, updateArgs]("policy/update", script.Returns[stored]())
	scriptGet          = script.Bind[policiesKeys, getArgs]("policy/get", script.Returns[getReply]())
	scriptCounters     = script.Bind[countersKeys, countersArgs]("policy/counters", script.Returns[countersPage]())
	scriptCounterReset = script.Bind[counterResetKeys, counterResetArgs]("policy/counter_reset", script.Returns[resetReply]())
)

type policyKeys struct {
	Record   string `lua:"tenant_record"`
	Policies string `lua:"policies"`
	Audit    string `lua:"audit_stream"`
	Events   string `lua:"event_stream"`
}

type createArgs struct {
	Policy      string `lua:"policy"` // JSON
	MaxPolicies int    `lua:"max_policies"`
	EventCtx    string `lua:"event_ctx"`
}

type updateArgs struct {
	ID       string `lua:"policy_id"`
	Patch    string `lua:"patch"` // JSON object
	EventCtx string `lua:"event_ctx"`
}

type policiesKeys struct {
	Policies string `lua:"policies"`
}

type getArgs struct {
	ID string `lua:"policy_id"` // "" = all
}

type countersKeys struct {
	Record string `lua:"tenant_record"`
	Index  string `lua:"counter_index"`
}

type countersArgs struct {
	Scope       string `lua:"scope"`
	Kind        string `lua:"kind"`
	Window      string `lua:"window"`
	Cursor      string `lua:"cursor"` // "<offset>" or "<offset>:<position>"
	PageSize    int    `lua:"page_size"`
	RunID       string `lua:"run_id"`
	IncludeZero string `lua:"include_zero"` // "1" or ""
}

type counterResetKeys struct {
	Record  string `lua:"tenant_record"`
	Counter string `lua:"counter"`
	Index   string `lua:"counter_index"`
	Events  string `lua:"event_stream"`
	Audit   string `lua:"audit_stream"`
}

type counterResetArgs struct {
	EventCtx string `lua:"event_ctx"`
	Reason   string `lua:"reason"`
	Tenant   string `lua:"tenant_id"`
	Field    string `lua:"field"`  // "" = a per_run counter
	Bucket   string `lua:"bucket"` // calendar only
}

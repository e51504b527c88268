package ledger

import "github.com/cyclesgo/cycles-go/internal/script"

// The ledger's scripts with their KEYS and ARGV, in the order and under the
// names of each script's header (lua/ledger/<name>.lua). The per-request
// ones are small and bounded and may share a pipeline; listings and the
// tenant-close batches run on their own.
var (
	scriptReserve         = script.Bind[reserveKeys, reserveArgs]("ledger/reserve", script.Pipelined)
	scriptDecide          = script.Bind[decideKeys, decideArgs]("ledger/decide", script.Pipelined)
	scriptCommit          = script.Bind[commitKeys, commitArgs]("ledger/commit", script.Pipelined)
	scriptRelease         = script.Bind[releaseKeys, releaseArgs]("ledger/release", script.Pipelined)
	scriptExtend          = script.Bind[extendKeys, extendArgs]("ledger/extend", script.Pipelined)
	scriptEvent           = script.Bind[eventKeys, eventArgs]("ledger/event", script.Pipelined)
	scriptGet             = script.Bind[reservationKeys, getArgs]("ledger/get", script.Pipelined)
	scriptExists          = script.Bind[reservationKeys, script.None]("ledger/exists", script.Pipelined)
	scriptList            = script.Bind[listKeys, listArgs]("ledger/list")
	scriptBalances        = script.Bind[balancesKeys, balancesArgs]("ledger/balances")
	scriptReleaseForClose = script.Bind[releaseForCloseKeys, releaseForCloseArgs]("ledger/release_for_close")
)

type reserveKeys struct {
	Prefix      string   `lua:"tenant_prefix"`
	Record      string   `lua:"tenant_record"`
	Budgets     string   `lua:"budget_index"`
	Reservation string   `lua:"reservation"`
	Deadlines   string   `lua:"deadlines"`
	Created     string   `lua:"created_index"`
	Expires     string   `lua:"expires_index"`
	Idem        string   `lua:"idem_record"`
	Events      string   `lua:"event_stream"`
	Budget      []string `lua:"budgets"` // each affected scope's budget hash
}

type reserveArgs struct {
	Mode           string `lua:"mode"` // live | dry
	ID             string `lua:"reservation_id"`
	Unit           string `lua:"unit"`
	Estimate       int64  `lua:"estimate"`
	TTLms          string `lua:"ttl_ms"` // decimal, "" = tenant default
	GraceMs        int64  `lua:"grace_ms"`
	Overage        string `lua:"overage_policy"`
	IdempotencyKey string `lua:"idempotency_key"`
	PayloadHash    string `lua:"payload_hash"`
	ScopePath      string `lua:"scope_path"`
	Affected       string `lua:"affected"` // JSON array
	Subject        string `lua:"subject"`  // JSON, "" = implied by the path
	Action         string `lua:"action"`   // JSON
	Metadata       string `lua:"metadata"` // JSON or ""
	EventCtx       string `lua:"event_ctx"`
	ObserveMode    string `lua:"observe_mode"`
	ActionKind     string `lua:"action_kind"`
	RiskClass      string `lua:"risk_class"`
	RunID          string `lua:"run_id"`
	PolicyKeys     string `lua:"policy_keys"` // JSON object or ""
}

type decideKeys struct {
	Prefix  string   `lua:"tenant_prefix"`
	Record  string   `lua:"tenant_record"`
	Budgets string   `lua:"budget_index"`
	Idem    string   `lua:"idem_record"`
	Events  string   `lua:"event_stream"`
	Budget  []string `lua:"budgets"`
}

type decideArgs struct {
	Unit           string `lua:"unit"`
	Estimate       int64  `lua:"estimate"`
	IdempotencyKey string `lua:"idempotency_key"`
	PayloadHash    string `lua:"payload_hash"`
	ScopePath      string `lua:"scope_path"`
	Affected       string `lua:"affected"`
	Subject        string `lua:"subject"`
	Action         string `lua:"action"`
	EventCtx       string `lua:"event_ctx"`
	ActionKind     string `lua:"action_kind"`
	RiskClass      string `lua:"risk_class"`
	RunID          string `lua:"run_id"`
	PolicyKeys     string `lua:"policy_keys"`
}

type reservationKeys struct {
	Reservation string `lua:"reservation"`
}

// getArgs are an archived record's field/value pairs (none: read the hash).
type getArgs struct {
	Pairs []string `lua:"archived_pairs"`
}

type commitKeys struct {
	Prefix      string `lua:"tenant_prefix"`
	Record      string `lua:"tenant_record"`
	Reservation string `lua:"reservation"`
	Deadlines   string `lua:"deadlines"`
	Events      string `lua:"event_stream"`
}

type commitArgs struct {
	ID             string   `lua:"reservation_id"`
	Unit           string   `lua:"unit"`
	Amount         int64    `lua:"amount"`
	IdempotencyKey string   `lua:"idempotency_key"`
	PayloadHash    string   `lua:"payload_hash"`
	Metrics        string   `lua:"metrics"`  // JSON or ""
	Metadata       string   `lua:"metadata"` // JSON or ""
	EventCtx       string   `lua:"event_ctx"`
	Archive        string   `lua:"archive"` // "1" or ""
	ScopeFilter    string   `lua:"scope_filter"`
	Archived       []string `lua:"archived_pairs"` // archivedPairs, on a second run
}

type releaseKeys struct {
	Prefix      string `lua:"tenant_prefix"`
	Record      string `lua:"tenant_record"`
	Reservation string `lua:"reservation"`
	Deadlines   string `lua:"deadlines"`
}

type releaseArgs struct {
	ID             string   `lua:"reservation_id"`
	IdempotencyKey string   `lua:"idempotency_key"`
	PayloadHash    string   `lua:"payload_hash"`
	Reason         string   `lua:"reason"`
	AuditCtx       string   `lua:"audit_ctx"` // "" when not audited
	Archive        string   `lua:"archive"`   // "1" or ""
	ScopeFilter    string   `lua:"scope_filter"`
	Archived       []string `lua:"archived_pairs"` // archivedPairs, on a second run
}

type extendKeys struct {
	Prefix      string `lua:"tenant_prefix"`
	Record      string `lua:"tenant_record"`
	Reservation string `lua:"reservation"`
	Deadlines   string `lua:"deadlines"`
	Expires     string `lua:"expires_index"`
	Idem        string `lua:"idem_record"`
}

type extendArgs struct {
	ID             string `lua:"reservation_id"`
	ExtendByMs     int64  `lua:"extend_by_ms"`
	IdempotencyKey string `lua:"idempotency_key"`
	PayloadHash    string `lua:"payload_hash"`
	Metadata       string `lua:"metadata"` // JSON or ""
	ScopeFilter    string `lua:"scope_filter"`
}

type eventKeys struct {
	Prefix  string   `lua:"tenant_prefix"`
	Record  string   `lua:"tenant_record"`
	Budgets string   `lua:"budget_index"`
	Event   string   `lua:"event_record"`
	Idem    string   `lua:"idem_record"`
	Events  string   `lua:"event_stream"`
	Budget  []string `lua:"budgets"` // each affected scope's budget hash
}

type eventArgs struct {
	ID             string `lua:"event_id"`
	Unit           string `lua:"unit"`
	Amount         int64  `lua:"amount"`
	Overage        string `lua:"overage_policy"`
	IdempotencyKey string `lua:"idempotency_key"`
	PayloadHash    string `lua:"payload_hash"`
	ScopePath      string `lua:"scope_path"`
	Affected       string `lua:"affected"` // JSON array
	Subject        string `lua:"subject"`  // JSON
	Action         string `lua:"action"`   // JSON
	Metrics        string `lua:"metrics"`  // JSON or ""
	Metadata       string `lua:"metadata"` // JSON or ""
	ClientTimeMs   string `lua:"client_time_ms"`
	EventCtx       string `lua:"event_ctx"`
}

type listKeys struct {
	Prefix  string `lua:"tenant_prefix"`
	Index   string `lua:"index"`
	Created string `lua:"created_index"`
	Expires string `lua:"expires_index"`
}

type listArgs struct {
	Direction       string `lua:"direction"`
	Lowest          string `lua:"lowest"`
	Highest         string `lua:"highest"`
	Consumed        int64  `lua:"consumed"`
	Limit           int    `lua:"limit"`
	ScanBudget      int    `lua:"scan_budget"`
	Filters         string `lua:"filters"` // JSON
	BoundaryScore   string `lua:"boundary_score"`
	ReserveMetadata string `lua:"reserve_metadata"` // "1" | "0"
	CommitMetadata  string `lua:"commit_metadata"`  // "1" | "0"
}

type balancesKeys struct {
	Prefix  string `lua:"tenant_prefix"`
	Budgets string `lua:"budget_index"`
}

type balancesArgs struct {
	After      string `lua:"after"`
	Limit      int    `lua:"limit"`
	ScanBudget int    `lua:"scan_budget"`
	Unit       string `lua:"unit"`
	Segments   string `lua:"segments"` // JSON array
}

type releaseForCloseKeys struct {
	Prefix    string `lua:"tenant_prefix"`
	Record    string `lua:"tenant_record"`
	Deadlines string `lua:"deadlines"`
	Events    string `lua:"event_stream"`
}

type releaseForCloseArgs struct {
	BatchSize int    `lua:"batch_size"`
	EventCtx  string `lua:"event_ctx"`
	Archive   string `lua:"archive"` // "1" or ""
}

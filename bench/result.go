// Package bench holds the result format of cmd/cycles-bench and the
// regression gate of `make bench-check`: the medians of several runs'
// headline figures compared with bench/baseline.json.
//
// A result is one JSON file. Its headline figures are the ones the gate
// watches; everything else (every cell's percentiles, CPU split, ledger
// checks) is there for the reader of BENCHMARKS.md.
package bench

import (
	"encoding/json"
	"fmt"
	"os"
)

// Better says which direction of a figure is an improvement.
type Better string

const (
	Higher Better = "higher"
	Lower  Better = "lower"
)

// Machine describes where a run happened.
type Machine struct {
	Hostname   string `json:"hostname"`
	NumCPU     int    `json:"nproc"`
	CPUModel   string `json:"cpu_model"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GoVersion  string `json:"go_version"`
	Redis      string `json:"redis_version"`
	Kernel     string `json:"kernel,omitempty"`
}

// Config is what the run did.
type Config struct {
	Clients       []int    `json:"clients"`
	Shapes        []string `json:"shapes"`
	Ops           []string `json:"ops"`
	DurationS     float64  `json:"duration_s"`
	WarmupS       float64  `json:"warmup_s"`
	Conns         int      `json:"conns"`
	CeilingConns  int      `json:"ceiling_conns"`
	Backlog       int      `json:"backlog"`
	Allocated     int64    `json:"allocated"`
	RateAlgorithm string   `json:"rate_algorithm"`
	// StartedProcesses is true when the tool started redis-server and
	// cyclesd itself (then CPU time per process is reported).
	StartedProcesses bool     `json:"started_processes"`
	ServerArgs       []string `json:"server_args,omitempty"`
	// ServerGOGC is the GOGC the started cyclesd ran with ("100" when
	// nothing set it: Go's default, which cyclesd keeps). Empty in results
	// older than the field, whose cyclesd may have set GOGC=400 itself.
	ServerGOGC string `json:"server_gogc,omitempty"`
}

// Latency is a latency distribution in milliseconds.
type Latency struct {
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// CPU is the CPU time each process spent per 1,000 operations of a cell
// (milliseconds of CPU per 1,000 ops), when the tool knows the processes.
type CPU struct {
	Redis  float64 `json:"redis_ms_per_kop"`
	Server float64 `json:"server_ms_per_kop"`
	Client float64 `json:"client_ms_per_kop"`
	// Utilisation over the cell's window, in cores (1.0 = one core busy).
	RedisCores  float64 `json:"redis_cores"`
	ServerCores float64 `json:"server_cores"`
	ClientCores float64 `json:"client_cores"`
	// Redis's own time per script call (INFO commandstats, EVALSHA + EVAL)
	// and script calls per operation (e.g. 2 for reserve + commit; API-key
	// verification after the key cache expires adds a few).
	ScriptUsPerCall  float64 `json:"redis_script_us_per_call,omitempty"`
	ScriptCallsPerOp float64 `json:"redis_script_calls_per_op,omitempty"`
	// CommandsPerRead is script calls (EVALSHA/EVAL) per Redis socket read
	// (INFO stats): 1 without pipelining.
	CommandsPerRead float64 `json:"redis_commands_per_read,omitempty"`
}

// Window is what one load phase measured: the operations and errors of
// its measured window, the window's length, the throughput and latency over
// it, and the CPU the processes used meanwhile. Cells, the ceiling and the
// physical limit are each a Window plus what sets them apart.
type Window struct {
	Ops        int64   `json:"ops"`
	Errors     int64   `json:"errors"`
	DurationS  float64 `json:"duration_s"`
	Throughput float64 `json:"throughput_per_s"`
	Latency    Latency `json:"latency"`
	CPU        *CPU    `json:"cpu,omitempty"`
}

// Cell is one (operation, shape, clients) measurement.
type Cell struct {
	Op         string         `json:"op"`
	Shape      string         `json:"shape"`
	Clients    int            `json:"clients"`
	ErrorCodes map[string]int `json:"error_codes,omitempty"`
	// Outcomes counts non-error results worth telling apart (rate-limit
	// allowed/denied, decide ALLOW/DENY).
	Outcomes map[string]int64 `json:"outcomes,omitempty"`
	Window
	Note string `json:"note,omitempty"`
}

// LedgerCheck compares the Redis totals of every budget a group of cells
// used with what the successful calls imply.
type LedgerCheck struct {
	Group      string   `json:"group"`
	Budgets    int      `json:"budgets"`
	Mismatches int      `json:"mismatches"`
	Details    []string `json:"details,omitempty"`
	// Reconciled counts calls that failed (e.g. a deadline) and were
	// retried with the same idempotency key before the check, as a client
	// that lost a response would.
	Reconciled int `json:"reconciled,omitempty"`
}

// Ceiling is the raw EVALSHA throughput of the reserve script straight
// against the same Redis, with the same KEYS/ARGV shape as the service.
type Ceiling struct {
	Script string `json:"script"`
	Conns  int    `json:"conns"`
	Window
	// Single is the same script on one connection (the floor of a reserve's
	// latency).
	Single *Latency `json:"single_conn_latency,omitempty"`
}

// Physical is the physical-limit row: the smallest script with a 3-scope
// reserve's atomic shape (cmd/cycles-bench physicalScript) run with EVALSHA
// on Conns connections against the same Redis right after the ceiling.
type Physical struct {
	Conns int `json:"conns"`
	Window
	// Ratio is the ceiling's throughput over this one's (same run).
	Ratio float64 `json:"ceiling_ratio"`
}

// Memory is Redis's used_memory per reservation created through the
// service: while ACTIVE and once settled (committed; record, indexes and
// idempotency records kept), plus one sample record's MEMORY USAGE and
// encoding in both states.
type Memory struct {
	Reservations          int64          `json:"reservations"`
	Errors                int64          `json:"errors"`
	ErrorCodes            map[string]int `json:"error_codes,omitempty"`
	ActiveBytes           float64        `json:"active_bytes_per_reservation"`
	SettledBytes          float64        `json:"settled_bytes_per_reservation"`
	RecordActiveBytes     int64          `json:"record_active_bytes"`
	RecordActiveEncoding  string         `json:"record_active_encoding"`
	RecordSettledBytes    int64          `json:"record_settled_bytes"`
	RecordSettledEncoding string         `json:"record_settled_encoding"`
	// IdempotencyBytes is one reserve idempotency record (MEMORY USAGE);
	// Index*Bytes are the deadline, created and expires indexes' MEMORY
	// USAGE divided by the reservations (the indexes hold nothing else).
	IdempotencyBytes  int64   `json:"idempotency_record_bytes"`
	IndexActiveBytes  float64 `json:"index_active_bytes_per_reservation"`
	IndexSettledBytes float64 `json:"index_settled_bytes_per_reservation"`
}

// Backlog is the expiry-backlog drain measurement.
type Backlog struct {
	Reservations int64   `json:"reservations"`
	Tenants      int     `json:"tenants"`
	SeedS        float64 `json:"seed_s"`
	SeedErrors   int64   `json:"seed_errors"`
	DrainS       float64 `json:"drain_s"`
	ServerDrainS float64 `json:"server_drain_s"`
	Expired      int64   `json:"expired"`
	// Other outcomes of the triggered sweep and what the periodic sweeper
	// did meanwhile (GetSweeperStatus totals), to account for every entry.
	SweepCounts       map[string]int64 `json:"sweep_counts,omitempty"`
	BackgroundExpired int64            `json:"background_expired,omitempty"`
	Rate              float64          `json:"expired_per_s"`
	Mismatches        int              `json:"mismatches"`
	// Entries in the tenants' deadline indexes after seeding and after the
	// sweep (read straight from Redis).
	IndexedBefore int64 `json:"indexed_before"`
	IndexedAfter  int64 `json:"indexed_after"`
	// The expiry script calls of the triggered sweep, from Redis's SLOWLOG
	// (logging every command during the drain): how many, and how long the
	// longest held Redis (every other client waits that long). Less
	// load-dependent than the drain time: the calls are bounded by
	// cyclesd -sweeper-batch-time.
	ScriptCalls   int64   `json:"script_calls,omitempty"`
	ScriptMaxMs   float64 `json:"script_max_ms,omitempty"`
	ScriptP50Ms   float64 `json:"script_p50_ms,omitempty"`
	PerScriptCall float64 `json:"expired_per_script_call,omitempty"`
}

// Headline is one gated figure.
type Headline struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Better Better  `json:"better"`
}

// Target is one of the targets and whether this run met it.
type Target struct {
	Name   string  `json:"name"`
	Want   string  `json:"want"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Met    bool    `json:"met"`
	Margin string  `json:"margin"`
}

// Result is one run of cycles-bench.
type Result struct {
	Version    int           `json:"version"`
	StartedAt  string        `json:"started_at"`
	Commit     string        `json:"commit"`
	Machine    Machine       `json:"machine"`
	Config     Config        `json:"config"`
	Cells      []Cell        `json:"cells"`
	Ledger     []LedgerCheck `json:"ledger"`
	Ceiling    *Ceiling      `json:"ceiling,omitempty"`
	Backlog    *Backlog      `json:"backlog,omitempty"`
	Physical   *Physical     `json:"physical,omitempty"`
	Memory     *Memory       `json:"memory,omitempty"`
	Headline   []Headline    `json:"headline"`
	Targets    []Target      `json:"targets"`
	Mismatches int           `json:"ledger_mismatches"`
	Errors     int64         `json:"errors"`
	// Failed lists what makes this run fail by itself (ledger mismatches,
	// request errors above the tolerance); empty means the run is valid.
	Failed []string `json:"failed,omitempty"`
	// Runs is set on a median result (the baseline): the files it came from.
	Runs []string `json:"runs,omitempty"`
}

// ResultVersion is the current result format.
const ResultVersion = 1

// Cell returns the cell of (op, shape, clients), or nil.
func (r *Result) Cell(op, shape string, clients int) *Cell {
	for i := range r.Cells {
		c := &r.Cells[i]
		if c.Op == op && c.Shape == shape && c.Clients == clients {
			return c
		}
	}
	return nil
}

// Headline returns the headline figure called name.
func (r *Result) HeadlineValue(name string) (Headline, bool) {
	for _, h := range r.Headline {
		if h.Name == name {
			return h, true
		}
	}
	return Headline{}, false
}

// Load reads a result file.
func Load(path string) (*Result, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Version != ResultVersion {
		return nil, fmt.Errorf("%s: result version %d, want %d", path, r.Version, ResultVersion)
	}
	return &r, nil
}

// Save writes r as indented JSON.
func (r *Result) Save(path string) error {
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(raw, '\n'), 0o644)
}

// Package script is the only code in cyclesd that sends commands to Redis.
//
// It compiles the embedded Lua scripts (lib/int64.lua + lib/core.lua + body),
// loads them at start on every shard (on Redis 7 as Functions, FUNCTION LOAD;
// else SCRIPT LOAD), runs them with FCALL or EVALSHA (reloading transparently
// when Redis lost them; function.go), checks their reply's shape -- a flat
// reply {"OK", "f1", <stream>, <event id>, <field>...} from the ledger
// mutations (RunFlat), {"OK", json} from the other scripts (Run) -- and maps
// refusals {code, json} to *apierr.Error and connectivity failures to
// UNAVAILABLE.
// Domain packages (admin, ledger, sweeper, events, ratelimit, ...) declare
// each script with its typed KEYS and ARGV (Bind, bind.go; README.md) and
// call it through that binding; they never see a Redis client nor build
// KEYS or ARGV by position.
package script

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/store/redisinfo"
)

// Executor runs the embedded scripts against one Redis deployment (single node,
// Sentinel or Cluster).
type Executor struct {
	client redis.UniversalClient
	// progs are the compiled scripts (shared with WithClient executors);
	// runners and sources say how this Executor sends each.
	progs     programs
	runners   map[string]runner
	sources   map[string]string
	tracer    trace.Tracer
	spanStart []trace.SpanStartOption
	// pipe pipelines concurrent calls (pipeline.go); nil = off.
	pipe *pipeliner
	// callTimeout bounds calls whose context has no earlier deadline.
	callTimeout time.Duration
	// scriptFlags says whether the scripts' Redis 7 flag lines are sent
	// (WithScriptFlags); functions, whether scripts are Redis 7 Functions
	// called with FCALL instead of EVALSHA (WithFunctions, function.go).
	scriptFlags, functions bool
	// eventHook is told the stream and last id of every run that appended
	// events (SetEventHook); nil = nobody listens.
	eventHook func(stream, lastID string)
}

// SetEventHook registers fn to be called after every successful script run
// that appended events, with the stream key and the id of the last event it
// appended (lua/lib/core.lua adds both to the result); and, after a call that
// got no reply (timeout, connection lost: it may have run), once per key of
// the call with an empty id. The all-tenant event feed uses it to announce
// tenants with new events (internal/events/doc.go). fn runs on the caller's
// goroutine and must not block. Call it before the Executor is used.
func (e *Executor) SetEventHook(fn func(stream, lastID string)) { e.eventHook = fn }

// Option configures an Executor.
type Option func(*Executor)

// WithTracerProvider makes every script call a client span ("redis.script
// <name>") under the RPC's span.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(e *Executor) { e.tracer = tp.Tracer("github.com/cyclesgo/cycles-go/internal/script") }
}

// WithCallTimeout bounds every call whose context has no earlier deadline by
// d: the executor of long-lived work (event streams and their tail pollers,
// whose contexts live as long as the stream) gets the same bound as an RPC.
func WithCallTimeout(d time.Duration) Option {
	return func(e *Executor) { e.callTimeout = d }
}

// WithScriptFlags sends the scripts' Redis 7 flag lines ("#!lua
// flags=allow-oom" on the scripts that free budget or revoke a key, so they
// run even when Redis is full). Without it (Redis 6, the embedded store,
// which reject the line) the same sources run without their flag line.
func WithScriptFlags() Option {
	return func(e *Executor) { e.scriptFlags = true }
}

// WithFunctions sends every script as a Redis 7 Function (FUNCTION LOAD once
// per master, then FCALL), so the Lua libraries are defined once instead of
// on every call (function.go); the flag lines become function flags. Only
// for Redis 7 or later on every master; the embedded store and Redis 6 run
// the same sources with EVALSHA.
func WithFunctions() Option {
	return func(e *Executor) { e.functions, e.scriptFlags = true, true }
}

// New compiles every embedded script. It does not contact Redis.
func New(client redis.UniversalClient, opts ...Option) (*Executor, error) {
	return newWith(client, nil, opts...)
}

// Flags returns the flag line of script name ("" if it has none).
func (e *Executor) Flags(name string) string {
	if p, ok := e.progs[name]; ok {
		return p.shebang
	}
	return ""
}

// newWith compiles the embedded scripts plus extra (name -> body; the tests
// of the Lua libraries add their own scripts there).
func newWith(client redis.UniversalClient, extra map[string]string, opts ...Option) (*Executor, error) {
	ps, err := compileAll(extra)
	if err != nil {
		return nil, err
	}
	e := newExecutor(client, ps)
	for _, o := range opts {
		o(e)
	}
	e.prepare()
	return e, nil
}

func newExecutor(client redis.UniversalClient, ps programs) *Executor {
	return &Executor{client: client, progs: ps,
		tracer: noop.NewTracerProvider().Tracer(""), pipe: newPipeliner(client, DefaultMaxInFlight)}
}

// prepare picks, once the options are known, how each script is sent.
func (e *Executor) prepare() {
	e.runners = make(map[string]runner, len(e.progs))
	e.sources = make(map[string]string, len(e.progs))
	for name, p := range e.progs {
		switch {
		case e.functions:
			e.runners[name] = fnRunner{p}
			e.sources[name] = p.lib.src
		case e.scriptFlags:
			e.runners[name] = evalRunner{p.flagged}
			e.sources[name] = p.flaggedSrc
		default:
			e.runners[name] = evalRunner{p.plain}
			e.sources[name] = p.src
		}
	}
	op := "EVALSHA"
	if e.functions {
		op = "FCALL"
	}
	e.spanStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system", "redis"), attribute.String("db.operation", op))}
}

// WithClient returns an Executor on another client (e.g. a separate pool for
// long-lived stream work) that shares e's compiled scripts and how they are
// sent (WithFunctions, WithScriptFlags), so they are compiled once per
// process. opts configure the new Executor only; it has no event hook.
func (e *Executor) WithClient(client redis.UniversalClient, opts ...Option) *Executor {
	n := newExecutor(client, e.progs)
	n.functions, n.scriptFlags = e.functions, e.scriptFlags
	for _, o := range opts {
		o(n)
	}
	n.prepare()
	return n
}

// Names lists the compiled scripts.
func (e *Executor) Names() []string {
	return slices.Sorted(maps.Keys(e.progs))
}

// Client is the underlying client, for the few non-script needs of
// infrastructure code (health PING, INFO, CONFIG GET at start-up).
func (e *Executor) Client() redis.UniversalClient { return e.client }

// Load sends SCRIPT LOAD for every script (to every master on Cluster), so the
// first EVALSHA of each script does not pay a NOSCRIPT round trip; with
// WithFunctions it loads the one library of every script instead
// (FUNCTION LOAD REPLACE) and deletes the libraries of other cyclesd versions.
func (e *Executor) Load(ctx context.Context) error {
	return redisinfo.ForEachMaster(ctx, e.client, func(ctx context.Context, c redis.Cmdable) error {
		if e.functions {
			loaded := map[*fnLibrary]bool{}
			for _, p := range e.progs {
				if loaded[p.lib] {
					continue
				}
				loaded[p.lib] = true
				if err := c.FunctionLoadReplace(ctx, p.lib.src).Err(); err != nil {
					return fmt.Errorf("function load %s: %w", p.lib.name, err)
				}
			}
			return pruneLibraries(ctx, c, e.progs)
		}
		for name, src := range e.sources {
			if err := c.ScriptLoad(ctx, src).Err(); err != nil {
				return fmt.Errorf("script load %s: %w", name, err)
			}
		}
		return nil
	})
}

// Run executes script d with keys and args and returns its raw JSON result.
// A refusal by the script is returned as *apierr.Error.
func (e *Executor) Run(ctx context.Context, d *Def, keys []string, args ...any) (json.RawMessage, error) {
	res, err := e.run(ctx, d, keys, args)
	if err != nil {
		return nil, err
	}
	if isFlat(res) {
		return nil, fmt.Errorf("script %s: flat reply where JSON was expected (use RunFlat)", d.name)
	}
	return json.RawMessage(res[1].(string)), nil
}

// FlatVersion is the format tag of a flat reply (lua/lib/core.lua FLAT_V):
// {"OK", FlatVersion, <stream>, <last event id>, <field>...}.
const FlatVersion = "f1"

// FlatFields is the index of a flat reply's first field.
const FlatFields = 4

// RunFlat executes a script that answers with a flat reply (okf in
// lua/lib/core.lua) and returns the whole reply; its fields start at
// FlatFields and are strings (bulk replies) or int64s (Lua numbers). A
// refusal by the script is returned as *apierr.Error.
func (e *Executor) RunFlat(ctx context.Context, d *Def, keys []string, args ...any) ([]any, error) {
	res, err := e.run(ctx, d, keys, args)
	if err != nil {
		return nil, err
	}
	if !isFlat(res) {
		return nil, fmt.Errorf("script %s: JSON reply where a flat one was expected (use Run)", d.name)
	}
	return res, nil
}

// isFlat reports whether a successful reply is flat (versus {"OK", json}).
func isFlat(res []any) bool {
	if len(res) < FlatFields {
		return false
	}
	v, _ := res[1].(string)
	return v == FlatVersion
}

// bounded gives ctx the executor's call timeout when it has no earlier
// deadline: one bound for every command the executor sends.
func (e *Executor) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if e.callTimeout > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > e.callTimeout {
			return context.WithTimeout(ctx, e.callTimeout)
		}
	}
	return ctx, func() {}
}

// run executes a script and returns its successful reply ("OK" first).
func (e *Executor) run(ctx context.Context, d *Def, keys []string, args []any) ([]any, error) {
	name := d.name
	r, ok := e.runners[name]
	if !ok {
		return nil, fmt.Errorf("script %q: not compiled", name)
	}
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	ctx, span := e.tracer.Start(ctx, d.spanName(), e.spanStart...)
	defer span.End()
	// EVALSHA or FCALL, loading the script on a miss (function.go);
	// concurrent calls are pipelined (pipeline.go).
	var res any
	var err error
	if e.pipe != nil {
		res, err = e.pipe.run(ctx, r, d.pipelined, keys, args)
	} else {
		res, err = r.do(ctx, e.client, keys, args)
	}
	if err != nil {
		err = classify(name, err)
		span.SetStatus(codes.Error, err.Error())
		if e.eventHook != nil && !errors.Is(err, context.Canceled) {
			// No reply: the script may have run and appended events all
			// the same (a read timeout). The hook learns which keys were
			// involved, with no id, and finds out for itself.
			for _, k := range keys {
				e.eventHook(k, "")
			}
		}
		return nil, err
	}
	out, err := decode(name, res)
	if err == nil && e.eventHook != nil {
		if stream, last, ok := emitted(res); ok {
			e.eventHook(stream, last)
		}
	}
	if ae, ok := apierr.As(err); ok {
		// A refusal is a correct answer, not a failed call.
		span.SetAttributes(attribute.String("cycles.refusal", string(ae.Code)))
	}
	return out, err
}

// RunInto runs a script and unmarshals its JSON result into out: strictly,
// and only into the declared type, when the script declares its reply
// (Returns).
func (e *Executor) RunInto(ctx context.Context, out any, d *Def, keys []string, args ...any) error {
	raw, err := e.Run(ctx, d, keys, args...)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if d.reply != nil {
		return d.decodeReply(raw, out)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("script %s: decode result: %w", d.name, err)
	}
	return nil
}

type refusal struct {
	Msg string          `json:"msg"`
	D   json.RawMessage `json:"d"`
}

// emitted returns the stream and last event id a successful run appended to
// (the optional third and fourth result elements of a JSON reply, the third
// and fourth, possibly empty, of a flat one).
func emitted(res any) (stream, lastID string, ok bool) {
	arr, _ := res.([]any)
	if len(arr) != 4 && !isFlat(arr) {
		return "", "", false
	}
	stream, _ = arr[2].(string)
	lastID, _ = arr[3].(string)
	return stream, lastID, stream != "" && lastID != ""
}

// decode checks a reply's shape and returns it when it is a success
// ({"OK", json[, stream, id]} or a flat reply); a refusal {code, json} is
// returned as *apierr.Error.
func decode(name string, res any) ([]any, error) {
	arr, ok := res.([]any)
	if !ok || len(arr) < 2 {
		return nil, fmt.Errorf("script %s: unexpected result shape %T", name, res)
	}
	code, _ := arr[0].(string)
	if code == "OK" && isFlat(arr) {
		return arr, nil
	}
	if len(arr) != 2 && len(arr) != 4 {
		return nil, fmt.Errorf("script %s: unexpected result shape (%d elements)", name, len(arr))
	}
	body, ok := arr[1].(string)
	if !ok {
		return nil, fmt.Errorf("script %s: unexpected result element %T", name, arr[1])
	}
	if code == "OK" {
		return arr, nil
	}
	var r refusal
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return nil, fmt.Errorf("script %s: decode refusal %s: %w", name, code, err)
	}
	ae := &apierr.Error{Code: apierr.Code(code), Message: r.Msg}
	// An empty Lua table encodes as {} on Redis but [] on the embedded store.
	var details map[string]any
	if len(r.D) > 0 && r.D[0] == '{' {
		if err := json.Unmarshal(r.D, &details); err != nil {
			return nil, fmt.Errorf("script %s: decode refusal details: %w", name, err)
		}
	}
	for k, v := range details {
		ae = ae.With(k, detailString(v))
	}
	return nil, ae
}

func detailString(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case nil:
		return ""
	default:
		b, _ := json.Marshal(t)
		return string(b)
	}
}

// classify maps a Redis failure: connectivity and timeouts become UNAVAILABLE
// (fail closed: the caller must not proceed), anything else INTERNAL.
func classify(name string, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	if IsUnavailable(err) {
		// The cause names Redis's address: it goes to the log, not the client.
		return &apierr.Error{Code: apierr.Unavailable, Message: "budget store unavailable", Cause: fmt.Errorf("script %s: %w", name, err)}
	}
	if IsStoreFull(err) {
		return &apierr.Error{Code: apierr.StoreFull,
			Message: "budget store is full (Redis maxmemory reached); new holds are refused, settle or release existing ones"}
	}
	return fmt.Errorf("script %s: %w", name, err)
}

// IsStoreFull reports whether err is Redis refusing a write at maxmemory
// (noeviction): "OOM command not allowed when used memory > 'maxmemory'".
// The script refused before its first write (Redis checks at the first
// write, or before a flagged script starts), so nothing was applied.
func IsStoreFull(err error) bool {
	return err != nil && strings.Contains(err.Error(), "OOM command not allowed")
}

// IsUnavailable reports whether err means Redis could not be reached in time.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrClosed) || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "connection refused", "i/o timeout", "connection pool timeout", "EOF"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

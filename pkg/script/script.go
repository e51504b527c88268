// Package script is the only code in cyclesd that sends commands to Redis.
//
// It compiles the embedded Lua scripts (lib/int64.lua + lib/core.lua + body),
// loads them at start (SCRIPT LOAD on every shard), runs them with EVALSHA
// (reloading transparently on NOSCRIPT), decodes their {status, json} result and
// maps refusals to *apierr.Error and connectivity failures to UNAVAILABLE.
// Domain packages (admin, ledger, sweeper, events, ratelimit) call Run and never
// see a Redis client.
package script

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cyclesgo/cycles-go/lua"
	"github.com/cyclesgo/cycles-go/pkg/apierr"
)

// libraries are prepended, in this order, to every script body.
var libraries = []string{"lib/int64.lua", "lib/core.lua"}

// includeDirective lines at the top of a script or library name further
// libraries to prepend (after the standard ones, in order), e.g.
// "-- include: lib/ledger.lua".
const includeDirective = "-- include:"

// includes returns the library paths a script body asks for.
func includes(body string) []string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "--") {
			if line == "" {
				continue
			}
			break // directives live in the header comment only
		}
		if rest, ok := strings.CutPrefix(line, includeDirective); ok {
			out = append(out, strings.Fields(rest)...)
		}
	}
	return out
}

// compile builds the source of one script: standard libraries, the script's
// includes with theirs (a library names what it needs with its own
// "-- include:" header, resolved transitively, each library once, every
// library after the ones it includes), then its body.
func compile(prelude, body string) (string, error) {
	var b strings.Builder
	b.WriteString(prelude)
	seen := map[string]bool{}
	var add func(incs []string) error
	add = func(incs []string) error {
		for _, inc := range incs {
			if seen[inc] {
				continue
			}
			seen[inc] = true
			lib, err := fs.ReadFile(lua.FS, inc)
			if err != nil {
				return fmt.Errorf("include %s: %w", inc, err)
			}
			if err := add(includes(string(lib))); err != nil {
				return fmt.Errorf("%s: %w", inc, err)
			}
			b.Write(lib)
			b.WriteByte('\n')
		}
		return nil
	}
	if err := add(includes(body)); err != nil {
		return "", err
	}
	b.WriteString(body)
	return b.String(), nil
}

// Executor runs the embedded scripts against one Redis deployment (single node,
// Sentinel or Cluster).
type Executor struct {
	client  redis.UniversalClient
	scripts map[string]*redis.Script
	sources map[string]string
	tracer  trace.Tracer
	// pipe pipelines concurrent calls (pipeline.go); nil = off.
	pipe *pipeliner
	// extraPipelinable marks test scripts as pipelinable.
	extraPipelinable map[string]bool
	// callTimeout bounds calls whose context has no earlier deadline.
	callTimeout time.Duration
	// shebangs are the Redis 7 script flag lines of the scripts that have
	// one; scriptFlags says whether they are sent (WithScriptFlags).
	shebangs    map[string]string
	scriptFlags bool
	// eventHook is told the stream and last id of every run that appended
	// events (SetEventHook); nil = nobody listens.
	eventHook func(stream, lastID string)
}

// SetEventHook registers fn to be called after every successful script run
// that appended events, with the stream key and the id of the last event it
// appended (lua/lib/core.lua adds both to the result); and, after a call that
// got no reply (timeout, connection lost: it may have run), once per key of
// the call with an empty id. The all-tenant event feed uses it to announce
// tenants with new events (pkg/events/doc.go). fn runs on the caller's
// goroutine and must not block. Call it before the Executor is used.
func (e *Executor) SetEventHook(fn func(stream, lastID string)) { e.eventHook = fn }

// Option configures an Executor.
type Option func(*Executor)

// WithTracerProvider makes every script call a client span ("redis.script
// <name>") under the RPC's span.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(e *Executor) { e.tracer = tp.Tracer("github.com/cyclesgo/cycles-go/pkg/script") }
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

// New compiles every embedded script. It does not contact Redis.
func New(client redis.UniversalClient, opts ...Option) (*Executor, error) {
	e, err := newWith(client, nil)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(e)
	}
	if e.scriptFlags {
		for name, shebang := range e.shebangs {
			src := shebang + "\n" + e.sources[name]
			e.scripts[name] = redis.NewScript(src)
			e.sources[name] = src
		}
	}
	return e, nil
}

// splitShebang splits a leading "#!lua ..." flag line off a script body.
// It must be the first line of the source Redis sees, so compile cannot
// leave it in the body (the libraries come first).
func splitShebang(body string) (shebang, rest string) {
	if !strings.HasPrefix(body, "#!") {
		return "", body
	}
	line, rest, _ := strings.Cut(body, "\n")
	return strings.TrimSpace(line), rest
}

// Flags returns the flag line of script name ("" if it has none).
func (e *Executor) Flags(name string) string { return e.shebangs[name] }

// newWith compiles the embedded scripts plus extra (name -> body), for tests
// of the Lua libraries.
func newWith(client redis.UniversalClient, extra map[string]string) (*Executor, error) {
	var prelude strings.Builder
	for _, lib := range libraries {
		b, err := fs.ReadFile(lua.FS, lib)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", lib, err)
		}
		prelude.Write(b)
		prelude.WriteByte('\n')
	}
	e := &Executor{client: client, scripts: map[string]*redis.Script{}, sources: map[string]string{}, shebangs: map[string]string{},
		tracer: noop.NewTracerProvider().Tracer(""), pipe: newPipeliner(client, DefaultMaxInFlight)}
	err := fs.WalkDir(lua.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".lua") || strings.HasPrefix(path, "lib/") {
			return nil
		}
		body, err := fs.ReadFile(lua.FS, path)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		name := strings.TrimSuffix(path, ".lua")
		shebang, rest := splitShebang(string(body))
		if shebang != "" {
			e.shebangs[name] = shebang
		}
		src, err := compile(prelude.String(), rest)
		if err != nil {
			return fmt.Errorf("script %s: %w", name, err)
		}
		e.scripts[name] = redis.NewScript(src)
		e.sources[name] = src
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.extraPipelinable = map[string]bool{}
	for name, body := range extra {
		e.extraPipelinable[name] = true
		src, err := compile(prelude.String(), body)
		if err != nil {
			return nil, fmt.Errorf("script %s: %w", name, err)
		}
		e.scripts[name] = redis.NewScript(src)
		e.sources[name] = src
	}
	return e, nil
}

// Names lists the compiled scripts.
func (e *Executor) Names() []string {
	names := make([]string, 0, len(e.scripts))
	for n := range e.scripts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Client is the underlying client, for the few non-script needs of
// infrastructure code (health PING, INFO, CONFIG GET at start-up).
func (e *Executor) Client() redis.UniversalClient { return e.client }

// Load sends SCRIPT LOAD for every script (to every master on Cluster), so the
// first EVALSHA of each script does not pay a NOSCRIPT round trip.
func (e *Executor) Load(ctx context.Context) error {
	load := func(ctx context.Context, c redis.Cmdable) error {
		for name, src := range e.sources {
			if err := c.ScriptLoad(ctx, src).Err(); err != nil {
				return fmt.Errorf("script load %s: %w", name, err)
			}
		}
		return nil
	}
	if cc, ok := e.client.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return load(ctx, c) })
	}
	return load(ctx, e.client)
}

// Run executes script name with keys and args and returns its raw JSON result.
// A refusal by the script is returned as *apierr.Error.
func (e *Executor) Run(ctx context.Context, name string, keys []string, args ...any) (json.RawMessage, error) {
	res, err := e.run(ctx, name, keys, args)
	if err != nil {
		return nil, err
	}
	if isFlat(res) {
		return nil, fmt.Errorf("script %s: flat reply where JSON was expected (use RunFlat)", name)
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
func (e *Executor) RunFlat(ctx context.Context, name string, keys []string, args ...any) ([]any, error) {
	res, err := e.run(ctx, name, keys, args)
	if err != nil {
		return nil, err
	}
	if !isFlat(res) {
		return nil, fmt.Errorf("script %s: JSON reply where a flat one was expected (use Run)", name)
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

// run executes a script and returns its successful reply ("OK" first).
func (e *Executor) run(ctx context.Context, name string, keys []string, args []any) ([]any, error) {
	s, ok := e.scripts[name]
	if !ok {
		return nil, fmt.Errorf("script %q: not compiled", name)
	}
	if e.callTimeout > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > e.callTimeout {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, e.callTimeout)
			defer cancel()
		}
	}
	ctx, span := e.tracer.Start(ctx, spanName(name), spanStart...)
	defer span.End()
	// Script.Run is EVALSHA, falling back to EVAL (which reloads) on NOSCRIPT;
	// concurrent calls are pipelined (pipeline.go).
	var res any
	var err error
	if e.pipe != nil {
		res, err = e.pipe.run(ctx, s, pipelinable[name] || e.extraPipelinable[name], keys, args)
	} else {
		res, err = s.Run(ctx, e.client, keys, args...).Result()
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

// spanStart are the start options of every script span, built once (they
// were allocated on every call).
var spanStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient),
	trace.WithAttributes(attribute.String("db.system", "redis"), attribute.String("db.operation", "EVALSHA"))}

// spanNames caches "redis.script <name>" per script (read-only after init
// of the embedded set; other names are built per call).
var spanNames = func() map[string]string {
	m := map[string]string{}
	_ = fs.WalkDir(lua.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".lua") && !strings.HasPrefix(path, "lib/") {
			name := strings.TrimSuffix(path, ".lua")
			m[name] = "redis.script " + name
		}
		return nil
	})
	return m
}()

func spanName(name string) string {
	if n, ok := spanNames[name]; ok {
		return n
	}
	return "redis.script " + name
}

// RunInto runs a script and unmarshals its JSON result into out.
func (e *Executor) RunInto(ctx context.Context, out any, name string, keys []string, args ...any) error {
	raw, err := e.Run(ctx, name, keys, args...)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("script %s: decode result: %w", name, err)
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
		ae.With(k, detailString(v))
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
		return &apierr.Error{Code: apierr.Unavailable, Message: "budget store unavailable: " + err.Error()}
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

package cycleshttp

import (
	"cmp"
	"context"
	"maps"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/contract"
	"github.com/cyclesgo/cycles-go/internal/protowire"
)

// The route table is the RPCs' (cycles.v1.http) method option (the package
// doc); each routed RPC declares beside it only what the proto cannot say
// (wires). One generic handler (route.ServeHTTP) serves every route through
// serve, the one call path.

// wire is what one routed RPC declares beside its routes.
type wire struct {
	// terse says when an answer leaves out its deny_detail (terse).
	terse func(req, resp protoreflect.Message) bool
	// before runs after the path and query are bound, before the body is
	// read (what it sets, the body may not set); after runs last.
	before, after hook
	// params reads query parameters by name where the field's kind does not
	// say how (protowire.ParseText).
	params parsers
	// call replaces the service's method (nil: the service's own).
	call func(ctx context.Context, req proto.Message) (any, error)
	// mount wraps the route's handler (one path whose meaning a parameter or
	// the body changes, a cached answer); nil leaves the route unmounted.
	mount func(a *API, h *route) http.Handler
}

// parsers read query parameters by name.
type parsers map[string]func(name, s string) (protoreflect.Value, error)

// hook is a request step of a route: w and r to read the body itself.
type hook func(a *API, w http.ResponseWriter, r *http.Request, req proto.Message) error

// check adapts a request check (a route without a body checks what its
// parameters cannot check one by one).
func check[Req proto.Message](f func(Req) error) hook {
	return func(_ *API, _ http.ResponseWriter, _ *http.Request, req proto.Message) error { return f(req.(Req)) }
}

// route serves one declared route.
type route struct {
	a      *API
	md     protoreflect.MethodDescriptor
	method string // full gRPC method name (auth rule, guard, logs)
	spec   *cyclesv1.HttpRoute
	plane  plane // the error vocabulary: the runtime spec's for the runtime and action-kind services, else the admin spec's
	params []param
	w      wire
	req    protoreflect.MessageType
	// answer is the answer's shape; plain is it without deny_detail (terse).
	answer, plain *protowire.Shape
	// call runs the service's method; nil: the service is not enabled.
	call func(ctx context.Context, req proto.Message) (any, error)
}

// routes mounts every declared route (one of a service not enabled answers
// 404 saying why), then the webhook family and the catch-all.
func (a *API) routes() {
	a.calls = map[string]func(ctx context.Context, req proto.Message) (any, error){}
	for _, s := range a.svc.Services.Provided() {
		for _, m := range s.Desc.Methods {
			h, impl := m.Handler, s.Impl
			a.calls["/"+s.Desc.ServiceName+"/"+m.MethodName] = func(ctx context.Context, req proto.Message) (any, error) {
				return h(impl, ctx, func(in any) error { proto.Merge(in.(proto.Message), req); return nil }, nil)
			}
		}
	}
	unused := maps.Clone(wires)
	for full, md := range contract.Methods() {
		specs, _ := proto.GetExtension(md.Options(), cyclesv1.E_Http).([]*cyclesv1.HttpRoute)
		name := string(md.Parent().Name()) + "/" + string(md.Name())
		w := wires[name]
		if len(specs) == 0 {
			continue
		}
		delete(unused, name)
		for _, spec := range specs {
			rt := newRoute(a, full, md, spec, w)
			var h http.Handler = rt
			if w.mount != nil {
				h = w.mount(a, rt)
			}
			if h != nil { // nil: a route mounted only when its service is enabled
				a.mux.Handle(spec.GetPattern(), h)
			}
		}
	}
	for name := range unused {
		panic("cycleshttp: wire declared for " + name + ", which no route serves")
	}
	a.webhookRoutes()
	a.mux.HandleFunc("/v1/", a.notFound)
}

// newRoute builds the route of spec on method md; a declaration naming no
// field panics here, in every test.
func newRoute(a *API, full string, md protoreflect.MethodDescriptor, spec *cyclesv1.HttpRoute, w wire) *route {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		panic("cycleshttp: " + err.Error())
	}
	rt := &route{a: a, md: md, method: full, spec: spec, w: w, call: w.call, req: mt, answer: a.shapes.Prepare(md.Output())}
	if w.terse != nil {
		rt.plain = rt.answer.Without("deny_detail")
	}
	if svc := md.Parent().Name(); svc != "RuntimeService" && svc != "ActionKindService" {
		rt.plane = adminPlane
	}
	if rt.call == nil {
		rt.call = a.calls[full] // nil: the service is not enabled
	}
	fields := md.Input().Fields()
	// Path wildcards bind the request field of the same name, if it has one.
	for _, seg := range strings.Split(spec.GetPattern(), "/") {
		if name, ok := strings.CutPrefix(seg, "{"); ok {
			if name = strings.TrimSuffix(name, "}"); fields.ByName(protoreflect.Name(name)) != nil {
				rt.params = append(rt.params, param{name: name, path: true})
			}
		}
	}
	for _, q := range spec.GetQuery() {
		q, required := strings.CutSuffix(q, "!")
		name, field, _ := strings.Cut(q, "=")
		rt.params = append(rt.params, param{name: name, field: field, required: required})
	}
	// Each binds the request field of its name (or field); a declaration
	// naming no field of the request is a programming error.
	for i := range rt.params {
		p := &rt.params[i]
		fd := fields.ByName(protoreflect.Name(cmp.Or(p.field, p.name)))
		if p.fd = fd; fd == nil {
			panic("cycleshttp: parameter " + p.name + " names no field of " + string(md.Input().FullName()))
		}
		switch p.parse = w.params[p.name]; {
		case p.parse != nil:
		case fd.Name() == "limit" && fd.Kind() == protoreflect.Int32Kind:
			p.parse = pageLimit
		default:
			p.parse = func(name, s string) (protoreflect.Value, error) { return protowire.ParseText(fd, name, s) }
		}
	}
	return rt
}

// ServeHTTP reads one request of the route and runs it through serve.
func (rt *route) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := rt.a
	if rt.call == nil {
		a.notServed(w, r, offWhy[string(rt.md.Parent().Name())])
		return
	}
	req := rt.req.New().Interface()
	err := bindParams(r, req.ProtoReflect(), rt.params)
	for _, step := range []hook{rt.w.before, rt.body, rt.w.after} {
		if err == nil && step != nil {
			err = step(a, w, r, req)
		}
	}
	a.serve(w, r, rt.method, rt.plane, cmp.Or(int(rt.spec.GetStatus()), http.StatusOK), req, err,
		func(ctx context.Context, req any) (any, error) {
			if err := checkCaller(ctx, rt.spec.GetCaller()); err != nil {
				return nil, err
			}
			return rt.call(ctx, req.(proto.Message))
		},
		func(resp any) any {
			m := resp.(proto.Message).ProtoReflect()
			if rt.w.terse != nil && rt.w.terse(req.ProtoReflect(), m) {
				return a.shapes.Write(rt.plain, m)
			}
			return a.shapes.Write(rt.answer, m)
		})
}

// body reads the JSON body as the route declares (an optional one, a budget
// transition's {reason, metadata}, may be left out).
func (rt *route) body(a *API, w http.ResponseWriter, r *http.Request, req proto.Message) error {
	if b := rt.spec.GetBody(); b == cyclesv1.HttpBody_HTTP_BODY_JSON || b == cyclesv1.HttpBody_HTTP_BODY_OPTIONAL && r.ContentLength != 0 {
		return protoJSON(a, w, r, req)
	}
	return nil
}

// checkCaller refuses a credential other than the one a route narrows its
// RPC's rule to (HttpRoute.caller): the event reads of the two planes share
// one RPC, and the webhook routes answer under the event read's rule.
func checkCaller(ctx context.Context, c cyclesv1.Caller) error {
	p, _ := auth.FromContext(ctx)
	switch c {
	case cyclesv1.Caller_CALLER_ADMIN:
		if !p.Admin {
			return apierr.New(apierr.Unauthorized, "this endpoint needs the admin key (X-Admin-API-Key)")
		}
	case cyclesv1.Caller_CALLER_TENANT:
		if p.Admin {
			return apierr.New(apierr.Unauthorized, "this endpoint needs a tenant API key; the admin reads GET /v1/admin/events")
		}
	}
	return nil
}

// ---- declared parameters ---------------------------------------------------------

// param is one declared path or query parameter, bound to the request field
// fd of its name (or field). Its text is read by the wire's parser of its
// name, else as the field says (protowire.ParseText; limit is from 1 to
// 200); repeated strings are comma-separated (explode=false: repeats
// accepted, blanks dropped).
type param struct {
	name, field    string
	path, required bool
	parse          func(name, s string) (protoreflect.Value, error)
	fd             protoreflect.FieldDescriptor
}

// bindParams sets the request fields of the declared parameters. Blank
// parameters are unset; unknown ones are ignored (the protocol's
// additive-parameter rule); a bad value is INVALID_REQUEST naming it.
func bindParams(r *http.Request, m protoreflect.Message, ps []param) error {
	qs := r.URL.Query()
	for _, p := range ps {
		vals := qs[p.name]
		if p.path {
			vals = []string{r.PathValue(p.name)}
		}
		if p.fd.IsList() {
			l := m.Mutable(p.fd).List()
			for _, v := range vals {
				for _, s := range strings.Split(v, ",") {
					if s = strings.TrimSpace(s); s != "" {
						l.Append(protoreflect.ValueOfString(s))
					}
				}
			}
			continue
		}
		s := ""
		if len(vals) > 0 {
			s = vals[0]
		}
		if p.fd.Kind() == protoreflect.Int64Kind && strings.HasSuffix(string(p.fd.Name()), "_ms") {
			s = strings.TrimSpace(s)
		}
		if s == "" {
			if p.required {
				return apierr.Invalid(p.name, "query parameter is required")
			}
			continue
		}
		v, err := p.parse(p.name, s)
		if err != nil {
			return err
		}
		if v.IsValid() { // a parse that only checks sets nothing
			m.Set(p.fd, v)
		}
	}
	return nil
}

// pageLimit reads a page size from 1 to 200 (the services cap it).
func pageLimit(name, s string) (protoreflect.Value, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 1 {
		return protoreflect.Value{}, apierr.Invalid(name, "must be an integer from 1 to 200, got %q", s)
	}
	return protoreflect.ValueOfInt32(int32(n)), nil
}

// refused reads a query parameter cyclesd does not serve: any value is
// INVALID_REQUEST saying why (it binds any singular field, never set).
func refused(why string) func(name, s string) (protoreflect.Value, error) {
	return func(name, _ string) (protoreflect.Value, error) {
		return protoreflect.Value{}, apierr.Invalid(name, "%s", why)
	}
}

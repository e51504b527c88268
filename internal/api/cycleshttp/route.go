package cycleshttp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// The route table: every route is one declaration (in its service's file) of
// its pattern, the call it makes (the gRPC method is the one its request type
// belongs to: methodOf), how its request is read (path and query parameters
// declared by name, a JSON body through the decoder), its success status and
// how its answer is written. One generic handler (route.ServeHTTP) serves them
// all through serve, the one call path.

// endpoint is one row of the route table.
type endpoint struct {
	pattern string // net/http pattern: "METHOD /path/{param}"
	h       http.Handler
}

// route binds one HTTP route to one gRPC method.
type route[Req proto.Message, Resp any] struct {
	a      *API
	method string // full gRPC method name (auth rule, guard, logs)
	status int    // success status
	off    string // why the route answers 404 when its service is absent (call nil)
	params []param
	body   func(a *API, w http.ResponseWriter, r *http.Request, req Req) error
	call   func(ctx context.Context, req Req) (Resp, error)
	encode func(req Req, resp Resp) any
}

// opt sets one of a route's optional properties.
type opt func(*routeOpts)

type routeOpts struct {
	status int
	off    string
	params []param
}

// created: the route answers 201 on success.
func created(o *routeOpts) { o.status = http.StatusCreated }

// off says why the route answers 404 when its service is not configured.
func off(why string) opt { return func(o *routeOpts) { o.off = why } }

// query declares the route's query parameters.
func query(ps ...param) opt { return func(o *routeOpts) { o.params = append(o.params, ps...) } }

// via binds method m of service svc; nil (route not served) when svc is nil.
func via[S any, Req, Resp any](svc S, m func(S, context.Context, Req) (Resp, error)) func(context.Context, Req) (Resp, error) {
	if any(svc) == nil {
		return nil
	}
	return func(ctx context.Context, req Req) (Resp, error) { return m(svc, ctx, req) }
}

// on declares a route whose answer is the response written in shape answer.
func on[Req, Resp proto.Message](a *API, pattern string, call func(context.Context, Req) (Resp, error),
	body func(*API, http.ResponseWriter, *http.Request, Req) error, answer *shape, opts ...opt) endpoint {
	enc := shaped[Resp](answer)
	return onReq(a, pattern, call, body, func(_ Req, resp Resp) json.RawMessage { return enc(resp) }, opts...)
}

// onReq declares a route whose answer also depends on the request. The
// route runs the gRPC method its request type belongs to (methodOf).
func onReq[Req proto.Message, Resp, Out any](a *API, pattern string, call func(context.Context, Req) (Resp, error),
	body func(*API, http.ResponseWriter, *http.Request, Req) error, encode func(Req, Resp) Out, opts ...opt) endpoint {
	o := routeOpts{status: http.StatusOK, off: "its service is not enabled on this server"}
	for _, f := range opts {
		f(&o)
	}
	var zero Req
	rt := &route[Req, Resp]{a: a, method: methodOf(zero.ProtoReflect().Descriptor()), status: o.status, off: o.off,
		params: o.params, body: body, call: call, encode: func(req Req, resp Resp) any { return encode(req, resp) }}
	// Path wildcards bind the request field of the same name, if it has one.
	fields := zero.ProtoReflect().Descriptor().Fields()
	for _, seg := range strings.Split(pattern, "/") {
		if name, ok := strings.CutPrefix(seg, "{"); ok {
			name = strings.TrimSuffix(name, "}")
			if fields.ByName(protoreflect.Name(name)) != nil {
				rt.params = append(rt.params, param{name: name, path: true})
			}
		}
	}
	for _, p := range rt.params { // a declaration naming no field fails at New, in every test
		p.fieldOf(fields, zero.ProtoReflect().Descriptor().FullName())
	}
	return endpoint{pattern: pattern, h: rt}
}

// methodOf is the full name of the one gRPC method whose request is md: a
// route names its method by its request type, so the two cannot disagree.
// A request type no method (or two) takes panics at New, in every test.
func methodOf(md protoreflect.MessageDescriptor) string {
	var found []string
	protoregistry.GlobalFiles.RangeFilesByPackage(md.ParentFile().Package(), func(f protoreflect.FileDescriptor) bool {
		for i := range f.Services().Len() {
			s := f.Services().Get(i)
			for j := range s.Methods().Len() {
				if m := s.Methods().Get(j); m.Input().FullName() == md.FullName() {
					found = append(found, "/"+string(s.FullName())+"/"+string(m.Name()))
				}
			}
		}
		return true
	})
	if len(found) != 1 {
		panic(fmt.Sprintf("cycleshttp: %s is the request of %d methods %v", md.FullName(), len(found), found))
	}
	return found[0]
}

// fieldOf is the request field p binds; a declaration naming no field of
// the request is a programming error.
func (p param) fieldOf(fields protoreflect.FieldDescriptors, msg protoreflect.FullName) protoreflect.FieldDescriptor {
	name := p.field
	if name == "" {
		name = protoreflect.Name(p.name)
	}
	fd := fields.ByName(name)
	if fd == nil {
		panic("cycleshttp: parameter " + p.name + " names no field of " + string(msg))
	}
	return fd
}

// ServeHTTP runs one request of the route through serve.
func (rt *route[Req, Resp]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := rt.a
	if rt.call == nil {
		a.notServed(w, r, rt.off)
		return
	}
	var zero Req
	req := zero.ProtoReflect().Type().New().Interface().(Req)
	err := bindParams(r, req.ProtoReflect(), rt.params)
	if err == nil && rt.body != nil {
		err = rt.body(a, w, r, req)
	}
	a.serve(w, r, rt.method, planeOf(rt.method), rt.status, req, err,
		func(ctx context.Context, req any) (any, error) { return rt.call(ctx, req.(Req)) },
		func(resp any) any { return rt.encode(req, resp.(Resp)) })
}

// planeOf is a method's error vocabulary: the runtime spec's for the runtime
// and action-kind services, the admin spec's for everything else.
func planeOf(method string) plane {
	if strings.HasPrefix(method, "/cycles.v1.RuntimeService/") || strings.HasPrefix(method, "/cycles.v1.ActionKindService/") {
		return runtimePlane
	}
	return adminPlane
}

// ---- declared parameters ---------------------------------------------------------

// param is one declared path or query parameter, bound to the request field
// of its name (or field). How its text is read follows the field: strings as
// they are; repeated strings comma-separated (repeats accepted); enums by
// their name without the enum's prefix; booleans true/false; integers in
// range; limit from 1 to 200; an int64 *_ms field as an ISO 8601 date-time.
// parse, when set, reads the text instead.
type param struct {
	name     string
	field    protoreflect.Name
	path     bool
	required bool
	parse    func(name, s string) (protoreflect.Value, error)
}

// q declares a query parameter bound to the field of the same name.
func q(name string) param { return param{name: name} }

// qf declares a query parameter bound to field.
func qf(name string, field protoreflect.Name) param { return param{name: name, field: field} }

// must makes a declared parameter required.
func (p param) must() param { p.required = true; return p }

// with reads the parameter with parse.
func (p param) with(parse func(name, s string) (protoreflect.Value, error)) param {
	p.parse = parse
	return p
}

// bindParams sets the request fields of the declared parameters. Blank
// parameters are unset; unknown ones are ignored (the protocol's
// additive-parameter rule); a bad value is INVALID_REQUEST naming it.
func bindParams(r *http.Request, m protoreflect.Message, ps []param) error {
	var qs url.Values
	for _, p := range ps {
		fd := p.fieldOf(m.Descriptor().Fields(), m.Descriptor().FullName())
		var vals []string
		if p.path {
			vals = []string{r.PathValue(p.name)}
		} else {
			if qs == nil {
				qs = r.URL.Query()
			}
			vals = qs[p.name]
		}
		s := ""
		if len(vals) > 0 {
			s = vals[0]
		}
		if fd.Kind() == protoreflect.Int64Kind && strings.HasSuffix(string(fd.Name()), "_ms") {
			s = strings.TrimSpace(s)
		}
		if s == "" && !fd.IsList() {
			if p.required {
				return apierr.Invalid(p.name, "query parameter is required")
			}
			continue
		}
		if fd.IsList() {
			l := m.Mutable(fd).List()
			for _, tok := range listParam(vals) {
				l.Append(protoreflect.ValueOfString(tok))
			}
			continue
		}
		parse := p.parse
		if parse == nil {
			parse = parserOf(fd)
		}
		v, err := parse(p.name, s)
		if err != nil {
			return err
		}
		if v.IsValid() { // a parse that only checks sets nothing
			m.Set(fd, v)
		}
	}
	return nil
}

// parserOf reads a parameter by its field's kind.
func parserOf(fd protoreflect.FieldDescriptor) func(name, s string) (protoreflect.Value, error) {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		return func(name, s string) (protoreflect.Value, error) {
			n, ok := enumByName(fd.Enum(), s)
			if !ok {
				return protoreflect.Value{}, apierr.Invalid(name, "unknown value %q", s)
			}
			return protoreflect.ValueOfEnum(n), nil
		}
	case protoreflect.BoolKind:
		return func(name, s string) (protoreflect.Value, error) {
			b, err := strconv.ParseBool(s)
			if err != nil {
				return protoreflect.Value{}, apierr.Invalid(name, "must be true or false, got %q", s)
			}
			return protoreflect.ValueOfBool(b), nil
		}
	case protoreflect.Int32Kind:
		if fd.Name() == "limit" {
			return func(name, s string) (protoreflect.Value, error) {
				n, err := strconv.ParseInt(s, 10, 32)
				if err != nil || n < 1 {
					return protoreflect.Value{}, apierr.Invalid(name, "must be an integer from 1 to 200, got %q", s)
				}
				return protoreflect.ValueOfInt32(int32(n)), nil
			}
		}
		return func(name, s string) (protoreflect.Value, error) {
			n, err := strconv.ParseInt(s, 10, 32)
			if err != nil {
				return protoreflect.Value{}, apierr.Invalid(name, "must be an integer, got %q", s)
			}
			return protoreflect.ValueOfInt32(int32(n)), nil
		}
	case protoreflect.Int64Kind: // the *_ms fields: an ISO 8601 date-time
		return func(name, s string) (protoreflect.Value, error) {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return protoreflect.Value{}, apierr.Invalid(name, "must be an ISO 8601 date-time (e.g. 2026-01-02T15:04:05Z), got %q", s)
			}
			return protoreflect.ValueOfInt64(t.UnixMilli()), nil
		}
	}
	return func(_, s string) (protoreflect.Value, error) { return protoreflect.ValueOfString(s), nil }
}

// listParam is an explode=false list parameter: comma-separated values,
// repeats accepted, blanks dropped.
func listParam(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// refused declares a query parameter cyclesd does not serve: any value is
// INVALID_REQUEST saying why. field is any singular field of the request (it
// is never set).
func refused(name string, field protoreflect.Name, why string) param {
	return qf(name, field).with(func(name, _ string) (protoreflect.Value, error) {
		return protoreflect.Value{}, apierr.Invalid(name, "%s", why)
	})
}

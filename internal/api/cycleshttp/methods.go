package cycleshttp

import (
	"net/http"
	"strings"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// routeMethods are the methods the wire serves; a known path called with
// another of these (or any other method) is a 405 naming the ones it takes.
var routeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowedMethods lists the methods a route serves at r's path, asking the
// route table itself (so the answer cannot drift from the routes): empty when
// no route serves the path, which is then a 404. Only the catch-all "/v1/"
// pattern reaches here, so a method-less route (the webhook family) never does.
func (a *API) allowedMethods(r *http.Request) []string {
	var allow []string
	probe := r.Clone(r.Context())
	for _, m := range routeMethods {
		if m == r.Method {
			continue
		}
		probe.Method = m
		if _, pattern := a.mux.Handler(probe); pattern != "/v1/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	return allow
}

// methodNotAllowed answers 405 with an Allow header and the protocol's
// error body when r's path is served under other methods; it reports whether
// it answered.
func (a *API) methodNotAllowed(w http.ResponseWriter, r *http.Request) bool {
	allow := a.allowedMethods(r)
	if len(allow) == 0 {
		return false
	}
	list := strings.Join(allow, ", ")
	w.Header().Set("Allow", list)
	writeBareError(w, r, http.StatusMethodNotAllowed, apierr.InvalidRequest,
		r.Method+" is not allowed on "+r.URL.Path+"; allowed: "+list)
	return true
}

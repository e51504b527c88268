package cycleshttp

import (
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// The v0.1.26 action-kind registry: GET /v1/action-kinds and
// GET /v1/action-kinds/{kind}, public (no key), over ActionKindService.

// actionKindsPrefix starts the registry's public routes (preAuth lets them
// through without a key, as the chain does).
const actionKindsPrefix = "/v1/action-kinds"

// registryETag validates cached registry pages: the registry changes only
// with its version (custom kinds are not published).
const registryETag = `"cycles-action-kinds-` + actionkind.Version + `"`

// cached answers 304 before the route runs when the client holds the
// current registry; the registry's routes are not mounted when it is not
// enabled.
func cached(_ *API, rt *route) http.Handler {
	if rt.call == nil {
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", registryETag)
		for tag := range strings.SplitSeq(r.Header.Get("If-None-Match"), ",") {
			if t := strings.TrimSpace(tag); t == registryETag || t == "*" {
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		rt.ServeHTTP(w, r)
	})
}

func riskParam(name, s string) (protoreflect.Value, error) {
	c, ok := actionkind.ParseRisk(s)
	if !ok {
		return protoreflect.Value{}, apierr.Invalid(name, "must be read_only, local_mutation, side_effect, external_side_effect or high_risk")
	}
	return protoreflect.ValueOfEnum(c.Proto().Number()), nil
}

func kindLimit(name, s string) (protoreflect.Value, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > actionkind.MaxPageSize {
		return protoreflect.Value{}, apierr.Invalid(name, "must be 1..%d", actionkind.MaxPageSize)
	}
	return protoreflect.ValueOfInt32(int32(n)), nil
}

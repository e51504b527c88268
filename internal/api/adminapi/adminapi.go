// Package adminapi is the gRPC handler of AdminService. It only delegates to
// internal/admin: the auth interceptor has already required the admin key and the
// validation interceptor has already run validate.Message on the request;
// errors are *apierr.Error, mapped to a status by the interceptor chain.
package adminapi

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/admin"
)

// handler serves AdminService with internal/admin's own methods, which carry
// the RPCs' names and types: there is nothing to translate, so no method is
// written out here. It embeds UnsafeAdminServiceServer in place of the
// Unimplemented stub, so an RPC added to the proto without its admin.Service
// method fails to compile here instead of answering UNIMPLEMENTED.
type handler struct {
	cyclesv1.UnsafeAdminServiceServer
	*admin.Service
}

// New returns the AdminService server backed by svc.
func New(svc *admin.Service) cyclesv1.AdminServiceServer { return handler{Service: svc} }

// Package adminapi is the gRPC handler of AdminService. It only delegates to
// internal/admin: the auth interceptor has already required the admin key and the
// validation interceptor has already run validate.Message on the request;
// errors are *apierr.Error, mapped to a status by the interceptor chain.
package adminapi

import (
	"context"
	"strings"

	"google.golang.org/grpc"

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

// adminMethods is the prefix of AdminService's full method names.
var adminMethods = "/" + cyclesv1.AdminService_ServiceDesc.ServiceName + "/"

// CountRefusals is the interceptor that counts AdminService's domain
// refusals (admin.Service.CountRefusal): one place for every RPC, in place of
// a counting call on each method's error path. It belongs innermost in the
// chain (server.Options.Inner), where the handler's *apierr.Error is still
// itself and requests refused by validation never reach it, as before.
func CountRefusals(svc *admin.Service) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if err != nil {
			if rpc, ok := strings.CutPrefix(info.FullMethod, adminMethods); ok {
				svc.CountRefusal(ctx, rpc, err)
			}
		}
		return resp, err
	}
}

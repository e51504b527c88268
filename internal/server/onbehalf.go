package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/reservationid"
)

// onBehalfUnary runs a tenant method the admin key called on a tenant's
// behalf (the method's Access.admin_on_behalf_of; the Cycles runtime spec's
// dual auth) as that tenant, the admin kept as the actor: the tenant is the
// request field the option names, or the owner of the reservation id it
// names. It is the chain's last step, so authentication, audit, the guard and
// validation saw the admin key exactly as on any admin call. A request that
// is not a message (the HTTP wire's undecodable body) passes to the handler,
// which reports why.
func onBehalfUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	field := accessOf(info.FullMethod).onBehalfOf
	p, _ := auth.FromContext(ctx)
	m, isMsg := req.(proto.Message)
	if field == "" || !p.Admin || !isMsg {
		return h(ctx, req)
	}
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName(field)
	if fd == nil { // a declaration naming no field: refuse, never run as the admin
		return nil, apierr.New(apierr.InternalError, "%s names no request field %s", info.FullMethod, field)
	}
	tenant := r.Get(fd).String()
	switch {
	case field == "reservation_id":
		owner, ok := reservationid.Owner(tenant)
		if !ok {
			return nil, apierr.New(apierr.NotFound, "reservation %s not found", tenant)
		}
		tenant = owner
	case tenant == "":
		return nil, apierr.Invalid(string(field), "%s query parameter is required when using admin key authentication", field)
	}
	return h(auth.WithPrincipal(ctx, auth.Principal{Tenant: tenant, Admin: true}), req)
}

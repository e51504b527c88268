package server

import (
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/cyclesgo/cycles-go/internal/contract"
)

// registerReflection serves gRPC reflection (v1 and v1alpha) from the
// embedded contract, which carries the proto comments, so `grpcurl describe`
// prints the documentation. Should the embedded set be unreadable (a build
// defect TestDescriptorSetIsCurrent catches), reflection still serves the
// shapes from the compiled-in registry.
func registerReflection(g *grpc.Server, log *zap.Logger) {
	opts := reflection.ServerOptions{Services: g}
	if res, err := contract.NewResolver(); err != nil {
		log.Warn("reflection without proto comments", zap.Error(err))
	} else {
		opts.DescriptorResolver = res
	}
	v1 := reflection.NewServerV1(opts)
	reflectionv1.RegisterServerReflectionServer(g, v1)
	reflectionv1alpha.RegisterServerReflectionServer(g, reflection.NewServer(opts))
}

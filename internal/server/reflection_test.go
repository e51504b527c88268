package server

import (
	"context"
	"strings"
	"testing"

	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// TestReflectionServesProtoComments is what `grpcurl describe` relies on:
// the file descriptor reflection returns carries the proto comments.
func TestReflectionServesProtoComments(t *testing.T) {
	conn, _, _ := start(t, &fakeRuntime{})
	stream, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stream.CloseSend() }()
	if err := stream.Send(&reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "cycles.v1.RuntimeService"},
	}); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var comments []string
	for _, raw := range res.GetFileDescriptorResponse().GetFileDescriptorProto() {
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(raw, &fd); err != nil {
			t.Fatal(err)
		}
		for _, loc := range fd.GetSourceCodeInfo().GetLocation() {
			comments = append(comments, loc.GetLeadingComments())
		}
	}
	all := strings.Join(comments, "\n")
	for _, want := range []string{
		"RuntimeService is the budget authority", // the service
		"CreateReservation holds `estimate`",     // an RPC
	} {
		if !strings.Contains(all, want) {
			t.Errorf("reflection lost the comment %q", want)
		}
	}

	// The other services still resolve (health comes from the program's registry).
	if err := stream.Send(&reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	list, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetListServicesResponse().GetService()) < 3 {
		t.Fatalf("services: %v", list.GetListServicesResponse())
	}
}

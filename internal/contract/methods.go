package contract

import (
	"iter"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Methods yields every method of every cycles.v1 service compiled into the
// program (the generated code registers them; the caller imports gen/) with
// its full gRPC method name, "/cycles.v1.Service/Method". It is the one walk
// over the contract: the auth interceptor's access table and the tests that
// must cover every RPC all read it.
func Methods() iter.Seq2[string, protoreflect.MethodDescriptor] {
	return func(yield func(string, protoreflect.MethodDescriptor) bool) {
		protoregistry.GlobalFiles.RangeFilesByPackage("cycles.v1", func(fd protoreflect.FileDescriptor) bool {
			for i := 0; i < fd.Services().Len(); i++ {
				sd := fd.Services().Get(i)
				for j := 0; j < sd.Methods().Len(); j++ {
					md := sd.Methods().Get(j)
					if !yield("/"+string(sd.FullName())+"/"+string(md.Name()), md) {
						return false
					}
				}
			}
			return true
		})
	}
}

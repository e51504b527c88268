package contract

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/cyclesgo/cycles-go/gen/cycles/v1" // registers the compiled-in descriptors
)

// TestDescriptorSetIsCurrent fails when proto/ (and so gen/) changed but the
// embedded set was not rebuilt: run `make descriptors`.
func TestDescriptorSetIsCurrent(t *testing.T) {
	set, err := DescriptorSet()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, embedded := range set.GetFile() {
		if !strings.HasPrefix(embedded.GetName(), "cycles/") {
			continue
		}
		seen++
		compiled, err := protoregistry.GlobalFiles.FindFileByPath(embedded.GetName())
		if err != nil {
			t.Fatalf("%s is in the embedded set but not compiled in: %v", embedded.GetName(), err)
		}
		if embedded.GetSourceCodeInfo() == nil {
			t.Errorf("%s: embedded without source info", embedded.GetName())
		}
		shape := proto.Clone(embedded)
		shape.ProtoReflect().Clear(shape.ProtoReflect().Descriptor().Fields().ByName("source_code_info"))
		if !proto.Equal(shape, protodesc.ToFileDescriptorProto(compiled)) {
			t.Errorf("%s: embedded descriptor differs from gen/; run `make descriptors`", embedded.GetName())
		}
	}
	compiled := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("cycles.v1", func(protoreflect.FileDescriptor) bool { compiled++; return true })
	if seen == 0 || seen != compiled {
		t.Fatalf("embedded set has %d cycles files, the program %d; run `make descriptors`", seen, compiled)
	}
}

func TestResolverPrefersCommentsAndFallsBack(t *testing.T) {
	res, err := NewResolver()
	if err != nil {
		t.Fatal(err)
	}
	d, err := res.FindDescriptorByName("cycles.v1.RuntimeService")
	if err != nil {
		t.Fatal(err)
	}
	loc := d.ParentFile().SourceLocations().ByDescriptor(d)
	if !strings.Contains(loc.LeadingComments, "budget authority") {
		t.Fatalf("RuntimeService comment missing: %q", loc.LeadingComments)
	}
	if _, err := res.FindFileByPath("google/protobuf/descriptor.proto"); err != nil {
		t.Fatalf("fallback to the program's registry: %v", err)
	}
}

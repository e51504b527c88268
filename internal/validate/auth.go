package validate

import cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"

func init() {
	// Introspection has no fields: the credential is the question.
	register(func(*cyclesv1.IntrospectRequest) error { return nil })
}

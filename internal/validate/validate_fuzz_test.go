package validate_test

import (
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/contract"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/scope"
	"github.com/cyclesgo/cycles-go/internal/validate"
	"github.com/cyclesgo/cycles-go/test/property/hashslot"
)

// requestTypes are the input types of every cycles.v1 RPC, sorted by name
// (the fuzz input's first byte picks one).
func requestTypes(tb testing.TB) []protoreflect.MessageType {
	tb.Helper()
	seen := map[protoreflect.FullName]bool{}
	for _, md := range contract.Methods() {
		seen[md.Input().FullName()] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, string(n))
	}
	sort.Strings(names)
	out := make([]protoreflect.MessageType, 0, len(names))
	for _, n := range names {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(n))
		if err != nil {
			tb.Fatalf("request type %s: %v", n, err)
		}
		out = append(out, mt)
	}
	if len(out) < 20 {
		tb.Fatalf("only %d request types found", len(out))
	}
	return out
}

type field struct {
	name  string
	value string
}

// strings collects every string set anywhere in m (fields, lists, map keys
// and values), with the name of the field holding it.
func stringsOf(m protoreflect.Message, out *[]field) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := string(fd.Name())
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapKey().Kind() == protoreflect.StringKind {
					*out = append(*out, field{name, k.String()})
				}
				switch fd.MapValue().Kind() {
				case protoreflect.StringKind:
					*out = append(*out, field{name, mv.String()})
				case protoreflect.MessageKind:
					stringsOf(mv.Message(), out)
				}
				return true
			})
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				switch fd.Kind() {
				case protoreflect.StringKind:
					*out = append(*out, field{name, l.Get(i).String()})
				case protoreflect.MessageKind:
					stringsOf(l.Get(i).Message(), out)
				}
			}
		case fd.Kind() == protoreflect.StringKind:
			*out = append(*out, field{name, v.String()})
		case fd.Kind() == protoreflect.MessageKind:
			stringsOf(v.Message(), out)
		}
		return true
	})
}

// FuzzValidateRequest decodes arbitrary bytes as one of the RPC request
// types and validates it. Validation never panics, refuses only with
// INVALID_REQUEST, and an accepted request cannot yield a key outside its
// tenant's hash slot: every tenant_id it carries is a tenant id whose keys
// hash exactly "{t:<tenant>}", every other string it carries (ids,
// idempotency keys, scope paths, names) stays in that slot wherever a key is
// built from it, and its scope path canonicalizes to a budget key in the slot.
func FuzzValidateRequest(f *testing.F) {
	types := requestTypes(f)
	index := map[protoreflect.FullName]uint8{}
	for i, mt := range types {
		index[mt.Descriptor().FullName()] = uint8(i)
	}
	for _, m := range seedRequests() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(index[m.ProtoReflect().Descriptor().FullName()], b)
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		mt := types[int(which)%len(types)]
		m := mt.New().Interface()
		if err := proto.Unmarshal(data, m); err != nil {
			return
		}
		err := validate.Message(m)
		if err != nil {
			if ae, ok := apierr.As(err); !ok || ae.Code != apierr.InvalidRequest {
				t.Fatalf("%s refused with %v, want INVALID_REQUEST", mt.Descriptor().FullName(), err)
			}
			return
		}
		var fs []field
		stringsOf(m.ProtoReflect(), &fs)
		tenant := "acme" // runtime requests: the tenant comes from the API key
		for _, f := range fs {
			if f.name == "tenant_id" && f.value != "" {
				if !auth.ValidTenantID(f.value) {
					t.Fatalf("%s accepted tenant_id %q, which is not a tenant id", mt.Descriptor().FullName(), f.value)
				}
				tenant = f.value
			}
		}
		tn := keys.Tenant(tenant)
		wantTag, wantSlot := "t:"+tenant, hashslot.Slot(tn.Prefix())
		check := func(k string) {
			if hashslot.Tag(k) != wantTag || hashslot.Slot(k) != wantSlot {
				t.Fatalf("%s: accepted input builds key %q outside tenant %q's slot %d", mt.Descriptor().FullName(), k, tenant, wantSlot)
			}
		}
		check(tn.Record())
		for _, f := range fs {
			check(tn.Idempotency("reserve", f.value))
			check(tn.Idempotency("extend:"+f.value, f.value))
			check(tn.Reservation(f.value))
			check(tn.Event(f.value))
			check(tn.APIKey(f.value))
			check(tn.Budget(f.value, "TOKENS"))
			if f.name == "scope_path" || f.name == "scope_prefix" {
				if c, err := scope.Canonical(tenant, f.value); err == nil {
					for _, u := range scope.AllUnits() {
						check(tn.Budget(c, u))
					}
				}
			}
		}
	})
}

// seedRequests are valid requests of the main RPCs (the committed corpus in
// testdata/fuzz/FuzzValidateRequest holds more, including refusals).
func seedRequests() []proto.Message {
	ttl, grace := int64(60_000), int64(0)
	return []proto.Message{
		&cyclesv1.CreateReservationRequest{
			IdempotencyKey: "r-1", Subject: &cyclesv1.Subject{Workspace: "Prod", Agent: "bot", Dimensions: map[string]string{"run_id": "x"}},
			Action:   &cyclesv1.Action{Kind: "llm.completion", Name: "gpt-4o-mini", Tags: []string{"a"}},
			Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 500}, TtlMs: &ttl, GracePeriodMs: &grace,
			OveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT,
		},
		&cyclesv1.CommitReservationRequest{ReservationId: "7d9f0c2e-8a4b-4c1d-9e2f-0123456789ab", IdempotencyKey: "c-1",
			Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 420}},
		&cyclesv1.ReleaseReservationRequest{ReservationId: "r1", IdempotencyKey: "rel-1", Reason: "done"},
		&cyclesv1.ExtendReservationRequest{ReservationId: "r1", IdempotencyKey: "e-1", ExtendByMs: 30_000},
		&cyclesv1.CreateEventRequest{IdempotencyKey: "ev-1", Subject: &cyclesv1.Subject{Tenant: "acme", Toolset: "search"},
			Action: &cyclesv1.Action{Kind: "tool.call", Name: "search"}, Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_CREDITS, Amount: 3}},
		&cyclesv1.DecideRequest{IdempotencyKey: "d-1", Subject: &cyclesv1.Subject{App: "a"},
			Action: &cyclesv1.Action{Kind: "k", Name: "n"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_USD_MICROCENTS, Amount: 1}},
		&cyclesv1.GetBalancesRequest{Workspace: "prod", Limit: 10},
		&cyclesv1.ListReservationsRequest{Agent: "bot", Limit: 5},
		&cyclesv1.CreateBudgetRequest{TenantId: "acme", ScopePath: "tenant:acme/workspace:Prod", Unit: cyclesv1.Unit_UNIT_TOKENS, Allocated: 10_000},
		&cyclesv1.FundBudgetRequest{TenantId: "acme", ScopePath: "tenant:acme", Unit: cyclesv1.Unit_UNIT_TOKENS,
			Operation: cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT, Amount: 5, IdempotencyKey: "f-1"},
		&cyclesv1.CreateTenantRequest{TenantId: "acme", Name: "Acme"},
		&cyclesv1.WatchEventsRequest{TenantId: "acme", Start: cyclesv1.StartPosition_START_POSITION_EARLIEST},
	}
}

// The seeds exercise the accepted path (where the slot checks run).
func TestFuzzSeedsAreAccepted(t *testing.T) {
	for _, m := range seedRequests() {
		if err := validate.Message(m); err != nil {
			t.Errorf("seed %s refused: %v", m.ProtoReflect().Descriptor().FullName(), err)
		}
	}
}

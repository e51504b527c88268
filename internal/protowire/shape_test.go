package protowire

import (
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/test/errtest"
)

// encode checks s against Resp's descriptor (as a route table does when
// built) and writes with it.
func encode[Resp proto.Message](s *Shape) func(Resp) string {
	var zero Resp
	s.Check(zero.ProtoReflect().Descriptor())
	return func(r Resp) string { return string(s.JSON(r.ProtoReflect())) }
}

// TestShapeWireRules: each rule the generic encoder declares once, on the
// exact bytes it writes.
func TestShapeWireRules(t *testing.T) {
	row := ShapeOf("bucket_start", "scope", "unit", "reserved")
	audit := ShapeOf("logs", "next_cursor?", "has_more").Nest("logs", ShapeOf("log_id", "timestamp", "key_id?", "status", "metadata?"))
	keys := ShapeOf("keys=api_keys", "next_cursor?", "has_more").With("keys", Item(func(k *cyclesv1.ApiKey) string { return "k:" + k.GetKeyId() }))
	for _, tc := range []struct {
		name string
		got  func() string
		want string
	}{
		{"int64 exact, enum without prefix, ms as ISO", func() string {
			return encode[*cyclesv1.UsageRow](row)(&cyclesv1.UsageRow{BucketStartMs: 1767225600123, Scope: "tenant:a",
				Unit: cyclesv1.Unit_UNIT_USD_MICROCENTS, Reserved: math.MaxInt64})
		}, `{"bucket_start":"2026-01-01T00:00:00.123Z","scope":"tenant:a","unit":"USD_MICROCENTS","reserved":9223372036854775807}`},
		{"zero values written unless omitted; unset time is empty", func() string {
			return encode[*cyclesv1.UsageRow](row)(&cyclesv1.UsageRow{})
		}, `{"bucket_start":"","scope":"","unit":"","reserved":0}`},
		{"empty list is [], omitted members and next_cursor dropped", func() string {
			return encode[*cyclesv1.ListAuditLogsResponse](audit)(&cyclesv1.ListAuditLogsResponse{})
		}, `{"logs":[],"has_more":false}`},
		{"nested shape, sorted map, HTML-safe escapes as encoding/json", func() string {
			return encode[*cyclesv1.ListAuditLogsResponse](audit)(&cyclesv1.ListAuditLogsResponse{NextCursor: "c", HasMore: true,
				Logs: []*cyclesv1.AuditLogEntry{{LogId: "<l&>", Status: 200, Metadata: map[string]string{"b": "2", "a": "1"}}}})
		}, `{"logs":[{"log_id":"\u003cl\u0026\u003e","timestamp":"","status":200,"metadata":{"a":"1","b":"2"}}],"next_cursor":"c","has_more":true}`},
		{"renamed member with a hand-written item", func() string {
			return encode[*cyclesv1.ListApiKeysResponse](keys)(&cyclesv1.ListApiKeysResponse{ApiKeys: []*cyclesv1.ApiKey{{KeyId: "x"}}})
		}, `{"keys":["k:x"],"has_more":false}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.got(); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestShapeNamingNoFieldPanics: a shape member or a nested shape's member
// naming no field of its message is a programming error, found when the
// shape is checked (every route table build checks its shapes).
func TestShapeNamingNoFieldPanics(t *testing.T) {
	for name, declare := range map[string]func(){
		"shape member":   func() { encode[*cyclesv1.UsageRow](ShapeOf("nope")) },
		"nested member":  func() { encode[*cyclesv1.ListAuditLogsResponse](ShapeOf("logs").Nest("logs", ShapeOf("nope"))) },
		"unknown member": func() { ShapeOf("a").Calc("b", nil) },
	} {
		t.Run(name, func(t *testing.T) {
			errtest.Panics(t, "no panic for a declaration that names no field", declare)
		})
	}
}

// TestDefaultShapes: a type without a declared shape is written in its
// fields' order, named and omitted as its wire options say; a response of
// one message field is that message's answer; a declared shape is used
// wherever its type is a member; Without drops one member.
func TestDefaultShapes(t *testing.T) {
	set := NewShapes().For(&cyclesv1.AuditLogEntry{}, ShapeOf("log_id", "status"))
	write := func(m proto.Message) string {
		set.Prepare(m.ProtoReflect().Descriptor())
		return string(set.Write(nil, m.ProtoReflect()))
	}
	for _, tc := range []struct {
		name string
		got  func() string
		want string
	}{
		{"fields in order, a wire name x of x_ms as ISO", func() string {
			return write(&cyclesv1.QueryUsageResponse{Rows: []*cyclesv1.UsageRow{{BucketStartMs: 1767225600123, Scope: "s", Denials: 2}}})
		}, `{"rows":[{"bucket_start":"2026-01-01T00:00:00.123Z","scope":"s","unit":"","reserved":0,"committed":0,"released":0,` +
			`"expired":0,"debt_incurred":0,"reservations":0,"commits":0,"releases":0,"expirations":0,"denials":2}]}`},
		{"omit_empty drops an empty next_cursor; declared item shape", func() string {
			return write(&cyclesv1.ListAuditLogsResponse{Logs: []*cyclesv1.AuditLogEntry{{LogId: "l", Status: 200, TenantId: "t"}}})
		}, `{"logs":[{"log_id":"l","status":200}],"has_more":false}`},
		{"omit_empty keeps a set next_cursor; a renamed list", func() string {
			return write(&cyclesv1.ListBudgetsResponse{NextCursor: "c", HasMore: true})
		}, `{"ledgers":[],"next_cursor":"c","has_more":true}`},
		{"one message field: its answer", func() string {
			return write(&cyclesv1.GetActionKindResponse{Kind: &cyclesv1.ActionKind{Kind: "k", Deprecated: true}})
		}, `{"kind":"k","risk_class":"","mcp_tool_prefixes":[],"deprecated":true}`},
		{"Without drops the member", func() string {
			return string(ShapeOf("log_id", "status").Without("status").JSON((&cyclesv1.AuditLogEntry{LogId: "l"}).ProtoReflect()))
		}, `{"log_id":"l"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.got(); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

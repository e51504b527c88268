package script

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"reflect"
	"slices"
	"strings"

	"github.com/cyclesgo/cycles-go/lua"
)

// Declared JSON replies.
//
// A script that answers ok(<table>) (core.lua) sends a JSON reply. Its
// layout is declared once, in Go, as the type the reply is read into, given
// to Bind with Returns:
//
//	type holdsReply struct {
//		OverLimit bool              `json:"over_limit"`
//		Rows      LuaArray[holdRow] `json:"rows"`
//	}
//	var scriptHolds = script.Bind[holdsKeys, holdsArgs]("ops/holds", script.Returns[holdsReply]())
//
// The script's header states the same shape in a "-- JSON <name>:"
// declaration (declared.go), which the Lua table it builds follows:
//
//	-- JSON ops/holds: over_limit rows[]{id amount}
//
// A shape several scripts answer (a stored record) may be declared once,
// in any one Lua file, as "-- SHAPE <name>: <tokens>"; a script's
// declaration names it as "<name>" in place of its tokens.
//
// Shape tokens: a member name; "name{...}" an object member and its
// members; "name[]{...}" an array of objects; at the top level "{*}" is an
// object with any keys (a stored hash, read into a map), "[]{...}" an array
// of objects and "value" anything else (a flag, a string). Members are
// compared as a set, in any order.
//
// Two checks keep Lua and Go one definition: Def.CheckReply (run for every
// script by internal/app TestEveryScriptIsBoundToItsHeader) compares the
// Go type's json members with the Lua declaration, and RunInto decodes a
// declared reply strictly (an undeclared member is an error) and only into
// its declared type, so every test that runs the script also checks that
// the Lua writes what it declares.

// Returns declares the JSON reply of a script as a T (an option of Bind or
// Define). It panics when T has no JSON shape: a programming error that
// any test of the declaring package catches at init.
func Returns[T any]() func(*Def) {
	t := reflect.TypeFor[T]()
	paths, err := shapeOf(t)
	if err != nil {
		panic(fmt.Sprintf("script.Returns[%v]: %v", t, err))
	}
	return func(d *Def) { d.reply, d.replyShape = t, paths }
}

// ReplyType is the declared type of d's JSON reply (nil: none declared).
func (d *Def) ReplyType() reflect.Type { return d.reply }

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// shapeOf lists t's JSON shape as sorted member paths ("rows[].id"); a
// top-level map is "*", an array of objects "[].<member>" and anything
// else "".
func shapeOf(t reflect.Type) ([]string, error) {
	var out []string
	if err := addShape(&out, "", t, 0); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		out = []string{""}
	}
	slices.Sort(out)
	return out, nil
}

func addShape(out *[]string, prefix string, t reflect.Type, depth int) error {
	if depth > 8 {
		return fmt.Errorf("%s: nested too deep", prefix)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Slice && objectType(t.Elem()):
		return addShape(out, prefix+"[].", t.Elem(), depth+1)
	case t.Kind() == reflect.Map && prefix == "":
		*out = append(*out, "*")
		return nil
	case !objectType(t):
		if prefix != "" {
			*out = append(*out, strings.TrimSuffix(prefix, "."))
		}
		return nil
	}
	if prefix != "" && !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		// encoding/json promotes an embedded struct's members, even from an
		// unexported type.
		if sf.Anonymous && name == "" && objectType(sf.Type) {
			if err := addShape(out, prefix, sf.Type, depth+1); err != nil {
				return err
			}
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		ft := sf.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case objectType(ft):
			if err := addShape(out, prefix+name+".", ft, depth+1); err != nil {
				return err
			}
		case ft.Kind() == reflect.Slice && objectType(ft.Elem()):
			if err := addShape(out, prefix+name+"[].", ft.Elem(), depth+1); err != nil {
				return err
			}
		default:
			*out = append(*out, prefix+name)
		}
	}
	return nil
}

// objectType: a struct decoded member by member (not by its own
// UnmarshalJSON).
func objectType(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(unmarshalerType)
}

// parseShape reads a "-- JSON" declaration's tokens into sorted member
// paths (as shapeOf lists them).
func parseShape(tokens []string) ([]string, error) {
	src := strings.Join(tokens, " ")
	switch strings.TrimSpace(src) {
	case "value":
		return []string{""}, nil
	case "{*}":
		return []string{"*"}, nil
	}
	toks := strings.Fields(strings.NewReplacer("{", " { ", "}", " } ").Replace(src))
	var out []string
	var stack []string
	prefix := func() string { return strings.Join(stack, "") }
	for i, tok := range toks {
		switch {
		case tok == "{":
			if i == 0 {
				return nil, fmt.Errorf("a declaration starts with a member, not {")
			}
			prev := toks[i-1]
			if prev == "{" || prev == "}" {
				return nil, fmt.Errorf("{ after %q", prev)
			}
			out = out[:len(out)-1] // the member is an object, not a leaf
			stack = append(stack, prev+".")
		case tok == "}":
			if len(stack) == 0 {
				return nil, fmt.Errorf("unbalanced }")
			}
			stack = stack[:len(stack)-1]
		case tok == "[]" && i == 0:
			out = append(out, "[]")
		default:
			name := strings.TrimSuffix(tok, "[]")
			if !validName(name) {
				return nil, fmt.Errorf("member %q is not a name ([a-z][a-z0-9_]*)", tok)
			}
			if strings.HasSuffix(tok, "[]") && (i+1 == len(toks) || toks[i+1] != "{") {
				return nil, fmt.Errorf("%s: an array of what ({...})", tok)
			}
			out = append(out, prefix()+tok)
		}
	}
	if len(stack) != 0 {
		return nil, fmt.Errorf("unbalanced {")
	}
	slices.Sort(out)
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] {
			return nil, fmt.Errorf("member %s declared twice", out[i])
		}
	}
	return out, nil
}

// CheckReply compares d's declared JSON reply (Returns) with the "-- JSON"
// declaration in its script: the same members, nested alike. A script
// that declares one side only fails.
func (d *Def) CheckReply() error {
	decls, err := ParseDeclaredFile(d.name+".lua", "JSON")
	if err != nil {
		return err
	}
	tokens, inLua := decls[d.name]
	for name := range decls {
		if name != d.name {
			return fmt.Errorf("lua/%s.lua: declares the JSON reply of %s", d.name, name)
		}
	}
	switch {
	case d.reply == nil && !inLua:
		return nil
	case d.reply == nil:
		return fmt.Errorf("%s: lua declares a JSON reply, Go none (script.Returns)", d.name)
	case !inLua:
		return fmt.Errorf("%s: Go declares a JSON reply (%v), lua/%s.lua none (-- JSON %s: ...)", d.name, d.reply, d.name, d.name)
	}
	if len(tokens) == 1 && strings.HasPrefix(tokens[0], "<") && strings.HasSuffix(tokens[0], ">") {
		shapes, err := declaredShapes()
		if err != nil {
			return err
		}
		named, ok := shapes[strings.Trim(tokens[0], "<>")]
		if !ok {
			return fmt.Errorf("lua/%s.lua: -- JSON: no -- SHAPE %s in the script or its libraries", d.name, tokens[0])
		}
		tokens = named
	}
	lua, err := parseShape(tokens)
	if err != nil {
		return fmt.Errorf("lua/%s.lua: -- JSON: %w", d.name, err)
	}
	if slices.Equal(lua, d.replyShape) {
		return nil
	}
	var onlyGo, onlyLua []string
	for _, p := range d.replyShape {
		if !slices.Contains(lua, p) {
			onlyGo = append(onlyGo, shown(p))
		}
	}
	for _, p := range lua {
		if !slices.Contains(d.replyShape, p) {
			onlyLua = append(onlyLua, shown(p))
		}
	}
	return fmt.Errorf("%s: JSON reply: only in Go (%v): %v; only in Lua: %v", d.name, d.reply, onlyGo, onlyLua)
}

// declaredShapes are the "-- SHAPE" declarations of every Lua file, by
// name; a name declared twice is an error.
func declaredShapes() (map[string][]string, error) {
	out := map[string][]string{}
	err := fs.WalkDir(lua.FS, ".", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".lua") {
			return err
		}
		decls, err := ParseDeclaredFile(path, "SHAPE")
		if err != nil {
			return err
		}
		for name, tokens := range decls {
			if _, dup := out[name]; dup {
				return fmt.Errorf("lua/%s: SHAPE %s is declared in another file too", path, name)
			}
			out[name] = tokens
		}
		return nil
	})
	return out, err
}

func shown(p string) string {
	if p == "" {
		return "value"
	}
	return p
}

// decodeReply reads a declared JSON reply into out, which must be a
// pointer to the declared type; an undeclared member is an error.
func (d *Def) decodeReply(raw []byte, out any) error {
	if t := reflect.TypeOf(out); t != reflect.PointerTo(d.reply) {
		return fmt.Errorf("script %s: reads its reply into %v, declared %v", d.name, t, d.reply)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("script %s: decode result: %w", d.name, err)
	}
	return nil
}

package cycleshttp

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// strictKeys is the pass that encoding/json leaves out: it matches member
// names case-insensitively (with Unicode folding: "eStImAtE", or a Kelvin
// sign K for k, bind to "estimate") and lets a repeated member silently
// take the last value. Either is a parser differential: a proxy or WAF
// reading the body another way would validate one value while the ledger
// uses the other. strictKeys walks the tokens of body (already decoded
// once, so it is well-formed and within the decoder's depth limit) beside
// the Go type dst decodes into, and refuses, naming the member by its path:
//   - a member of a struct whose name is not exactly one of its json tags;
//   - a member name repeated in one object, at any depth (free-form maps
//     and metadata included).
func strictKeys(body []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	return walkValue(dec, reflect.TypeOf(dst), "")
}

// walkValue reads one JSON value whose Go type is t (nil: free-form).
func walkValue(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return apierr.Invalid("body", "malformed JSON: %v", err)
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	switch d {
	case '{':
		return walkObject(dec, t, path)
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if err := walkValue(dec, elem, path); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return nil
}

// walkObject reads the members of an object up to its closing brace.
func walkObject(dec *json.Decoder, t reflect.Type, path string) error {
	var fields map[string]reflect.Type
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = jsonFields(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	seen := make(map[string]struct{}, 8)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return apierr.Invalid("body", "malformed JSON: %v", err)
		}
		name, _ := tok.(string)
		field := path + name
		if _, dup := seen[name]; dup {
			return apierr.Invalid(field, "duplicate key")
		}
		seen[name] = struct{}{}
		next := elem
		if fields != nil {
			ft, known := fields[name]
			if !known {
				return apierr.Invalid(field, "unknown field (member names are case-sensitive)")
			}
			next = ft
		}
		if err := walkValue(dec, next, field+"."); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
}

// jsonFields maps the exact JSON names of struct t's fields to their types
// (the request types use plain `json:"name"` tags; an embedded untagged
// struct contributes its fields, as encoding/json reads them).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("json") == "" {
			for name, ft := range jsonFields(f.Type) {
				out[name] = ft
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

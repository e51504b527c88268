package defaults

import "reflect"

// KeepNegative is the struct tag (`defaults:"keep-negative"`) of a setting
// whose negative value means something ("off"): Fill gives it the default
// only when it is zero.
const KeepNegative = "keep-negative"

// Fill gives every unset setting of the options struct *v the value of the
// same field in def, the struct of defaults declared once beside the
// options: a number (count, size, rate or duration) that is zero or negative
// (only zero with the KeepNegative tag), field by field through nested
// structs. Unexported fields and fields of other kinds (funcs, pointers,
// strings) are left to the caller. T must be a struct type.
func Fill[T any](v *T, def T) {
	fill(reflect.ValueOf(v).Elem(), reflect.ValueOf(def))
}

func fill(dst, def reflect.Value) {
	t := dst.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		d, s := dst.Field(i), def.Field(i)
		keepNegative := f.Tag.Get("defaults") == KeepNegative
		switch d.Kind() {
		case reflect.Struct:
			fill(d, s)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if d.Int() == 0 || (d.Int() < 0 && !keepNegative) {
				d.SetInt(s.Int())
			}
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if d.Uint() == 0 {
				d.SetUint(s.Uint())
			}
		case reflect.Float32, reflect.Float64:
			if d.Float() == 0 || (d.Float() < 0 && !keepNegative) {
				d.SetFloat(s.Float())
			}
		}
	}
}

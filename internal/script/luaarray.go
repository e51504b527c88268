package script

import (
	"bytes"
	"encoding/json"
)

// LuaArray decodes a JSON array returned by a script, and also the "{}" that
// cjson produces for an empty Lua table.
type LuaArray[T any] []T

// UnmarshalJSON implements json.Unmarshaler.
func (l *LuaArray[T]) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("{}")) {
		*l = nil
		return nil
	}
	return json.Unmarshal(b, (*[]T)(l))
}

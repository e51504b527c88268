// Package cursor is the one codec of listing cursors. A listing's next_cursor
// is the unpadded base64url form of a position that listing defines (a key,
// a stream id, a small JSON object); clients treat it as opaque. A cursor
// that does not decode, or is longer than any this server issues, is
// INVALID_REQUEST naming the request field, so a forged cursor never reaches
// Redis as a position.
package cursor

import (
	"encoding/base64"
	"encoding/json"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// MaxLen bounds an encoded cursor. The longest position any listing issues is
// a budget key plus a member (well under 600 bytes encoded).
const MaxLen = 1024

var encoding = base64.RawURLEncoding

// Encode is the cursor of position.
func Encode(position string) string {
	return encoding.EncodeToString([]byte(position))
}

// Decode is the position of a cursor made by Encode; anything else is
// INVALID_REQUEST naming field. The empty cursor (a request for the first
// page) is the empty position.
func Decode(field, c string) (string, error) {
	if len(c) > MaxLen {
		return "", Invalid(field)
	}
	raw, err := encoding.DecodeString(c)
	if err != nil {
		return "", Invalid(field)
	}
	return string(raw), nil
}

// EncodeJSON is the cursor of a position held in a small struct.
func EncodeJSON(v any) string {
	// Positions are structs of strings and integers, which always marshal.
	b, _ := json.Marshal(v)
	return Encode(string(b))
}

// DecodeJSON reads a cursor made by EncodeJSON into v.
func DecodeJSON(field, c string, v any) error {
	raw, err := Decode(field, c)
	if err != nil {
		return err
	}
	if json.Unmarshal([]byte(raw), v) != nil {
		return Invalid(field)
	}
	return nil
}

// Invalid is the refusal of a cursor this server did not issue (or issued
// for another listing), for checks a listing makes on a decoded position.
func Invalid(field string) error {
	return apierr.Invalid(field, "is not a cursor this server issued for this listing")
}

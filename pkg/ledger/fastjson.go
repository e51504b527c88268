package ledger

import (
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// A direct decoder for the two JSON shapes every mutating script answers
// with: the result envelope and the response snapshot inside it. It exists
// because encoding/json was a fifth of cyclesd's CPU on the reserve path
// (reflection, a validation pass before decoding, and again inside every
// num/list UnmarshalJSON). It handles exactly what cjson produces (objects,
// arrays, strings with the common escapes, integers, booleans, null); on
// anything else (a \u escape, non-ASCII bytes, a field of an unexpected
// type, an unknown key that encoding/json would match case-insensitively)
// it reports errSlowPath and the caller decodes with encoding/json, so the
// outcome is always exactly encoding/json's. TestFastDecodeMatchesEncodingJSON
// and FuzzFastDecode hold the two to the same answers.

var errSlowPath = errors.New("fast JSON path declined")

type scan struct {
	b []byte
	i int
}

func (s *scan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scan) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scan) lit(word string) bool {
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// str reads a JSON string (the scanner is at its opening quote).
func (s *scan) str() (string, error) {
	b, fresh, err := s.strBytes()
	if err != nil {
		return "", err
	}
	if fresh {
		// b is a new buffer nobody else holds: no second copy.
		return unsafe.String(unsafe.SliceData(b), len(b)), nil
	}
	return string(b), nil
}

// strBytes reads a JSON string's bytes: a slice of the input when it has no
// escapes (fresh false), else a newly allocated unescaped buffer (fresh true).
func (s *scan) strBytes() ([]byte, bool, error) {
	if s.peek() != '"' {
		return nil, false, errSlowPath
	}
	s.i++
	start := s.i
	// Fast path: no escapes.
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return v, false, nil
		case c == '\\':
			v, err := s.strEscaped(start)
			return v, true, err
		case c < 0x20 || c >= utf8.RuneSelf:
			return nil, false, errSlowPath
		}
		s.i++
	}
	return nil, false, errSlowPath
}

func (s *scan) strEscaped(start int) ([]byte, error) {
	// Size the buffer to this string: find its closing quote first.
	end := s.i
	for end < len(s.b) && s.b[end] != '"' {
		if s.b[end] == '\\' {
			end++
		}
		end++
	}
	out := make([]byte, 0, end-start)
	out = append(out, s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return out, nil
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return nil, errSlowPath
			}
			var r byte
			switch s.b[s.i+1] {
			case '"':
				r = '"'
			case '\\':
				r = '\\'
			case '/':
				r = '/'
			case 'b':
				r = '\b'
			case 'f':
				r = '\f'
			case 'n':
				r = '\n'
			case 'r':
				r = '\r'
			case 't':
				r = '\t'
			default: // \uXXXX and anything invalid
				return nil, errSlowPath
			}
			out = append(out, r)
			s.i += 2
		case c < 0x20 || c >= utf8.RuneSelf:
			return nil, errSlowPath
		default:
			out = append(out, c)
			s.i++
		}
	}
	return nil, errSlowPath
}

// number reads a JSON number literal and returns its text.
func (s *scan) number() ([]byte, error) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		digits++
	}
	if digits == 0 || (digits > 1 && s.b[start] == '0') || (digits > 1 && s.b[start] == '-' && s.b[start+1] == '0') {
		return nil, errSlowPath
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return nil, errSlowPath // not an integer: let encoding/json judge
		}
	}
	return s.b[start:s.i], nil
}

func (s *scan) boolean() (bool, error) {
	s.ws()
	switch {
	case s.lit("true"):
		return true, nil
	case s.lit("false"):
		return false, nil
	}
	return false, errSlowPath
}

func (s *scan) null() bool {
	s.ws()
	return s.lit("null")
}

// rawStr reads a string without escapes and returns its bytes (no copy);
// anything else declines. Keys and amounts are such strings.
func (s *scan) rawStr() ([]byte, error) {
	if s.peek() != '"' {
		return nil, errSlowPath
	}
	start := s.i + 1
	for i := start; i < len(s.b); i++ {
		c := s.b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return s.b[start:i], nil
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return nil, errSlowPath
		}
	}
	return nil, errSlowPath
}

// object calls field for each key; field must consume the value. The key
// aliases the input (callers compare it, which does not allocate).
func (s *scan) object(field func(key []byte) error) error {
	if s.peek() != '{' {
		return errSlowPath
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		k, err := s.rawStr()
		if err != nil {
			return err
		}
		if s.peek() != ':' {
			return errSlowPath
		}
		s.i++
		if err := field(k); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return errSlowPath
		}
	}
}

// array calls elem for each element of a JSON array and reports whether
// there was one: "{}" exactly (cjson's empty table) is no array, as
// list.UnmarshalJSON has it (nil, where "[]" gives an empty slice).
func (s *scan) array(elem func() error) (bool, error) {
	switch s.peek() {
	case '{':
		if s.i+1 < len(s.b) && s.b[s.i+1] == '}' {
			s.i += 2
			return false, nil
		}
		return false, errSlowPath
	case '[':
		s.i++
	default:
		return false, errSlowPath
	}
	if s.peek() == ']' {
		s.i++
		return true, nil
	}
	for {
		if err := elem(); err != nil {
			return true, err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true, nil
		default:
			return true, errSlowPath
		}
	}
}

// skip consumes any value.
func (s *scan) skip() error {
	switch c := s.peek(); {
	case c == '"':
		_, err := s.str()
		return err
	case c == '{':
		return s.object(func([]byte) error { return s.skip() })
	case c == '[':
		s.i++
		if s.peek() == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.skip(); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.i++
			case ']':
				s.i++
				return nil
			default:
				return errSlowPath
			}
		}
	case c == 't' || c == 'f':
		_, err := s.boolean()
		return err
	case c == 'n':
		if s.null() {
			return nil
		}
		return errSlowPath
	default:
		_, err := s.number()
		return err
	}
}

// end requires nothing but whitespace after the top-level value.
func (s *scan) end() error {
	s.ws()
	if s.i != len(s.b) {
		return errSlowPath
	}
	return nil
}

// strField reads a string-typed field (null leaves it unchanged).
func (s *scan) strField(dst *string) error {
	if s.null() {
		return nil
	}
	v, err := s.str()
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

func (s *scan) boolField(dst *bool) error {
	if s.null() {
		return nil
	}
	v, err := s.boolean()
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

// numField reads a num exactly as num.UnmarshalJSON does: a string of
// digits or a bare integer; null and "" are 0.
func (s *scan) numField(dst *num) error {
	if s.null() {
		*dst = 0
		return nil
	}
	var text []byte
	if s.peek() == '"' {
		t, err := s.rawStr()
		if err != nil {
			return err
		}
		if len(t) == 0 {
			*dst = 0
			return nil
		}
		text = t
	} else {
		t, err := s.number()
		if err != nil {
			return err
		}
		text = t
	}
	v, ok := parseInt64(text)
	if !ok {
		return errSlowPath
	}
	*dst = num(v)
	return nil
}

// parseInt64 is strconv.ParseInt(text, 10, 64) for an optional '-' and
// decimal digits (no '+', no '_'), without allocating; ok is false for
// anything else, including overflow.
func parseInt64(text []byte) (int64, bool) {
	neg := false
	if len(text) > 0 && text[0] == '-' {
		neg, text = true, text[1:]
	}
	if len(text) == 0 || len(text) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range text {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	// 19 digits fit in a uint64; check the int64 range.
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// numPtrField is numField for *num fields: null leaves the pointer nil.
func (s *scan) numPtrField(dst **num) error {
	if s.null() {
		*dst = nil
		return nil
	}
	var n num
	if err := s.numField(&n); err != nil {
		return err
	}
	*dst = &n
	return nil
}

// unknown skips a field that is not in the struct, unless encoding/json
// would have matched it case-insensitively to one that is.
func (s *scan) unknown(key []byte, known []string) error {
	for _, k := range known {
		if strings.EqualFold(k, string(key)) {
			return errSlowPath
		}
	}
	return s.skip()
}

var resultKeys = []string{"replay", "resp", "rem_ttl", "denied", "overage", "debt"}

func fastResult(b []byte, r *result) error {
	resp, err := fastResultResp(b, r)
	if err == nil {
		r.Resp = string(resp)
	}
	return err
}

// fastResultResp is fastResult that leaves r.Resp empty and returns the
// snapshot's bytes instead (unescaped, not copied again into a string: the
// snapshot is decoded straight from them).
func fastResultResp(b []byte, r *result) ([]byte, error) {
	s := &scan{b: b}
	var resp []byte
	err := s.object(func(k []byte) error {
		switch string(k) {
		case "replay":
			return s.boolField(&r.Replay)
		case "resp":
			if s.null() {
				resp = nil
				return nil
			}
			v, _, err := s.strBytes()
			resp = v
			return err
		case "rem_ttl":
			return s.numPtrField(&r.RemTTL)
		case "denied":
			return s.strField(&r.Denied)
		case "overage":
			return s.numField(&r.Overage)
		case "debt":
			return s.numField(&r.Debt)
		}
		return s.unknown(k, resultKeys)
	})
	if err != nil {
		return nil, err
	}
	return resp, s.end()
}

var snapshotKeys = []string{"dry", "decision", "reason_code", "reservation_id", "reserved", "unit", "expires_at_ms",
	"scope_path", "affected", "caps", "balances", "grace_ms", "policy", "status", "charged", "released",
	"debt_incurred", "event_id", "extension_count"}

var balanceKeys = []string{"scope_path", "unit", "remaining", "reserved", "spent", "allocated", "debt",
	"overdraft_limit", "is_over_limit"}

func fastSnapshot(b []byte, sn *snapshot) error {
	s := &scan{b: b}
	err := s.object(func(k []byte) error {
		switch string(k) {
		case "dry":
			return s.boolField(&sn.Dry)
		case "decision":
			return s.strField(&sn.Decision)
		case "reason_code":
			return s.strField(&sn.ReasonCode)
		case "reservation_id":
			return s.strField(&sn.ReservationID)
		case "reserved":
			return s.numPtrField(&sn.Reserved)
		case "unit":
			return s.strField(&sn.Unit)
		case "expires_at_ms":
			return s.numField(&sn.ExpiresAtMs)
		case "scope_path":
			return s.strField(&sn.ScopePath)
		case "affected":
			if s.null() {
				sn.Affected = nil
				return nil
			}
			var out list[string]
			isArray, err := s.array(func() error {
				v, err := s.str()
				if err != nil {
					return err
				}
				out = append(out, v)
				return nil
			})
			if isArray && out == nil {
				out = list[string]{}
			}
			sn.Affected = out
			return err
		case "caps":
			return s.strField(&sn.Caps)
		case "balances":
			if s.null() {
				sn.Balances = nil
				return nil
			}
			var out list[balanceJSON]
			isArray, err := s.array(func() error {
				var bj balanceJSON
				if err := fastBalance(s, &bj); err != nil {
					return err
				}
				out = append(out, bj)
				return nil
			})
			if isArray && out == nil {
				out = list[balanceJSON]{}
			}
			sn.Balances = out
			return err
		case "grace_ms":
			return s.numField(&sn.GraceMs)
		case "policy":
			return s.strField(&sn.Policy)
		case "status":
			return s.strField(&sn.Status)
		case "charged":
			return s.numPtrField(&sn.Charged)
		case "released":
			return s.numPtrField(&sn.Released)
		case "debt_incurred":
			return s.numField(&sn.DebtIncurred)
		case "event_id":
			return s.strField(&sn.EventID)
		case "extension_count":
			return s.numField(&sn.ExtensionCount)
		}
		return s.unknown(k, snapshotKeys)
	})
	if err != nil {
		return err
	}
	return s.end()
}

func fastBalance(s *scan, b *balanceJSON) error {
	if s.null() {
		return nil
	}
	return s.object(func(k []byte) error {
		switch string(k) {
		case "scope_path":
			return s.strField(&b.ScopePath)
		case "unit":
			return s.strField(&b.Unit)
		case "remaining":
			return s.numField(&b.Remaining)
		case "reserved":
			return s.numField(&b.Reserved)
		case "spent":
			return s.numField(&b.Spent)
		case "allocated":
			return s.numField(&b.Allocated)
		case "debt":
			return s.numField(&b.Debt)
		case "overdraft_limit":
			return s.numField(&b.OverdraftLimit)
		case "is_over_limit":
			return s.boolField(&b.IsOverLimit)
		}
		return s.unknown(k, balanceKeys)
	})
}

// decodeInto decodes raw into v with the fast decoder when it accepts the
// input, else with encoding/json (which then also produces the error).
func decodeInto[T any](raw []byte, v *T, fast func([]byte, *T) error) error {
	var tmp T
	if err := fast(raw, &tmp); err == nil {
		*v = tmp
		return nil
	}
	return json.Unmarshal(raw, v)
}

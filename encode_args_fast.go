package job

import (
	"encoding/json"
	"strconv"
)

// appendArgJSON appends a's JSON, byte for byte what json.Marshal(a)
// gives, to out. Values of the predeclared types a ScheduleJob most often
// carries (a string of plain ASCII, an integer of any width, a bool) are
// written directly; json.Marshal, with its reflection and the two
// allocations of its result, takes the rest (floats, named types, a
// string that json.Marshal escapes, ...).
func appendArgJSON(out []byte, a any) ([]byte, error) {
	switch v := a.(type) {
	case string:
		if plainJSONString(v) {
			out = append(out, '"')
			out = append(out, v...)
			return append(out, '"'), nil
		}
	case int:
		return strconv.AppendInt(out, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(out, v, 10), nil
	case int32:
		return strconv.AppendInt(out, int64(v), 10), nil
	case int16:
		return strconv.AppendInt(out, int64(v), 10), nil
	case int8:
		return strconv.AppendInt(out, int64(v), 10), nil
	case uint:
		return strconv.AppendUint(out, uint64(v), 10), nil
	case uint64:
		return strconv.AppendUint(out, v, 10), nil
	case uint32:
		return strconv.AppendUint(out, uint64(v), 10), nil
	case uint16:
		return strconv.AppendUint(out, uint64(v), 10), nil
	case uint8:
		return strconv.AppendUint(out, uint64(v), 10), nil
	case bool:
		return strconv.AppendBool(out, v), nil
	}
	b, err := json.Marshal(a)
	if err != nil {
		return out, err
	}
	return append(out, b...), nil
}

// plainJSONString reports whether json.Marshal writes s between quotes
// as it is: printable ASCII, with no quote, backslash or character it
// escapes for HTML (<, >, &).
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c >= 0x80, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// WithArgumentConversion makes the job convert an argument that does not
// decode into its parameter's type as it is, the way go-job does:
//
//   - a string into a number ("42" for an int, "2.5" for a float64), a
//     bool ("true", "1", "f"; see strconv.ParseBool) or, for a
//     time.Duration, a duration ("90s") or a count of nanoseconds;
//   - a number or a bool into a string (42 becomes "42");
//   - a string holding JSON into a struct, map, slice or array
//     (`{"A":"Hello"}` for a struct parameter, "[1,2]" for a []int), or a
//     pointer to one of these.
//
// Only an argument as a whole is converted, not the fields inside a
// struct or map. Without this option (the default) arguments must decode
// into their parameters as they are, and a string for an int is
// ErrInvalidArguments.
//
// The conversion is decided when the instance is scheduled: ScheduleJob
// stores the converted value (42, not "42"), and an argument that does
// not convert is ErrInvalidArguments, naming the argument and the type
// it must have, before anything is stored. A manager that knows the kind
// only by its stored definition cannot see the executor's parameters: it
// stores the arguments as given, and the manager that runs the instance
// converts them with its own job's option (see Definition's
// ConvertArguments), ending the instance Terminated when one does not
// convert. That is the path of `jobctl schedule sum --args '["1","2"]'`
// or an HTTP client sending numbers as strings to a jobd that does not
// run the kind itself.
func WithArgumentConversion() JobOption {
	return jobOption(func(j *Job) error { j.convertArgs = true; return nil })
}

// ConvertsArguments reports whether the job converts arguments
// (WithArgumentConversion, or a definition with ConvertArguments).
func (j *Job) ConvertsArguments() bool { return j.convertArgs }

// errNoConversion: no conversion applies to this JSON value and type.
var errNoConversion = errors.New("no conversion applies")

var durationType = reflect.TypeFor[time.Duration]()

// convertArg returns the JSON value raw converted for a parameter of type
// t (see WithArgumentConversion), or an error saying why it cannot be.
// The caller decodes the result into t to check it.
func convertArg(raw []byte, t reflect.Type) ([]byte, error) {
	base := t
	for base.Kind() == reflect.Pointer {
		base = base.Elem()
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, errNoConversion
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return convertString(s, base)
	case c == 't' || c == 'f' || c == '-' || (c >= '0' && c <= '9'):
		// A bool or a number, for a string parameter: its JSON text.
		if base.Kind() == reflect.String {
			return json.Marshal(string(raw))
		}
	}
	return nil, errNoConversion
}

// convertString converts the string s for a parameter of type t (not a
// pointer).
func convertString(s string, t reflect.Type) ([]byte, error) {
	s = strings.TrimSpace(s)
	if t == durationType {
		if d, err := time.ParseDuration(s); err == nil {
			return strconv.AppendInt(nil, int64(d), 10), nil
		}
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, t.Bits())
		if err != nil {
			return nil, unwrapNum(err)
		}
		return strconv.AppendInt(nil, n, 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n, err := strconv.ParseUint(s, 10, t.Bits())
		if err != nil {
			return nil, unwrapNum(err)
		}
		return strconv.AppendUint(nil, n, 10), nil
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(s, t.Bits())
		if err != nil {
			return nil, unwrapNum(err)
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("%q is not a finite number", s)
		}
		return strconv.AppendFloat(nil, f, 'g', -1, t.Bits()), nil
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a bool (true, false, 1, 0, t, f)", s)
		}
		return strconv.AppendBool(nil, b), nil
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Array:
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(s)); err != nil {
			return nil, fmt.Errorf("the string is not JSON text for a %s: %v", t, err)
		}
		return buf.Bytes(), nil
	}
	return nil, errNoConversion
}

// unwrapNum drops strconv's function name from a parse error.
func unwrapNum(err error) error {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return fmt.Errorf("%q: %w", ne.Num, ne.Err)
	}
	return err
}

// convertDecode converts raw for t and decodes the result into t: the
// converted JSON and its value, or why raw does not convert.
func convertDecode(raw []byte, t reflect.Type) ([]byte, reflect.Value, error) {
	conv, err := convertArg(raw, t)
	if err != nil {
		return nil, reflect.Value{}, err
	}
	v, err := decodeArg(conv, t)
	if err != nil {
		return nil, reflect.Value{}, err
	}
	return conv, v, nil
}

// convertible reports whether WithArgumentConversion would make raw fit
// t: a strict job's error then says so.
func convertible(raw []byte, t reflect.Type) bool {
	_, _, err := convertDecode(raw, t)
	return err == nil
}

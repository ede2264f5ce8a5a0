package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
)

var (
	contextType  = reflect.TypeFor[context.Context]()
	instanceType = reflect.TypeFor[Instance]()
	errorType    = reflect.TypeFor[error]()
)

// executor is a user function bound for calls with stored arguments.
//
// Leading parameters of type context.Context and Instance (in either order,
// each at most once) are injected; the others are decoded from the stored
// JSON array into their declared types. A trailing error result is the
// attempt's error; the other results are the instance's results.
type executor struct {
	fn         reflect.Value
	typ        reflect.Type
	injectCtx  int // index of the context.Context parameter, or -1
	injectInst int // index of the Instance parameter, or -1
	params     []reflect.Type
	variadic   bool // the last of params is a variadic slice
	hasErr     bool // the last result is an error
	nResults   int  // results other than the trailing error
	// convert: an argument that does not decode as it is is converted
	// (WithArgumentConversion).
	convert bool
}

func newExecutor(fn any) (*executor, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil executor; pass a func to WithExecutor", ErrInvalidJob)
	}
	v := reflect.ValueOf(fn)
	t := v.Type()
	if t.Kind() != reflect.Func {
		return nil, fmt.Errorf("%w: executor is a %s, not a func; pass a func to WithExecutor", ErrInvalidJob, t)
	}
	if v.IsNil() {
		return nil, fmt.Errorf("%w: executor is a nil %s", ErrInvalidJob, t)
	}
	e := &executor{fn: v, typ: t, injectCtx: -1, injectInst: -1, variadic: t.IsVariadic()}
	i := 0
	for ; i < t.NumIn() && i < 2; i++ {
		switch p := t.In(i); {
		case p == contextType && e.injectCtx < 0:
			e.injectCtx = i
			continue
		case p == instanceType && e.injectInst < 0:
			e.injectInst = i
			continue
		}
		break
	}
	for ; i < t.NumIn(); i++ {
		p := t.In(i)
		if p == contextType || p == instanceType {
			return nil, fmt.Errorf("%w: executor %s takes %s as parameter %d; injected parameters must come first", ErrInvalidJob, t, p, i+1)
		}
		if err := decodable(p); err != nil {
			return nil, fmt.Errorf("%w: executor %s parameter %d: %v", ErrInvalidJob, t, i+1, err)
		}
		e.params = append(e.params, p)
	}
	if n := t.NumOut(); n > 0 && t.Out(n-1) == errorType {
		e.hasErr = true
		e.nResults = n - 1
	} else {
		e.nResults = n
	}
	return e, nil
}

// decodable rejects parameter types JSON can never fill.
func decodable(t reflect.Type) error {
	switch t.Kind() {
	case reflect.Func, reflect.Chan, reflect.UnsafePointer, reflect.Complex64, reflect.Complex128:
		return fmt.Errorf("type %s cannot be decoded from stored arguments", t)
	}
	return nil
}

// encodeArgs checks args against the executor's parameters and encodes them
// as a JSON array. Each argument is encoded and decoded into its parameter's
// type, so a mismatch is found before anything is stored; an argument of
// exactly its parameter's predeclared type (a string for a string, an int
// for an int: see sameBasicType) always decodes, and is not decoded.
func (e *executor) encodeArgs(args []any) ([]byte, error) {
	if err := e.checkCount(len(args)); err != nil {
		return nil, err
	}
	out := make([]byte, 1, 64)
	out[0] = '['
	for i, a := range args {
		if i > 0 {
			out = append(out, ',')
		}
		start := len(out)
		var err error
		if out, err = appendArgJSON(out, a); err != nil {
			return nil, fmt.Errorf("%w: argument %d (%T) cannot be encoded: %v", ErrInvalidArguments, i+1, a, err)
		}
		if p := e.paramType(i); !sameBasicType(a, p) {
			if _, err := decodeArg(out[start:], p); err != nil {
				if !e.convert {
					return nil, e.mismatch(i, a, out[start:], p, err)
				}
				conv, _, cerr := convertDecode(out[start:], p)
				if cerr != nil {
					return nil, conversionError(i, snippet(out[start:]), p, cerr)
				}
				out = append(out[:start], conv...)
			}
		}
	}
	return append(out, ']'), nil
}

// mismatch is the error of argument i, a (raw as JSON), which does not
// decode into its parameter's type p on a job without conversion.
func (e *executor) mismatch(i int, a any, raw []byte, p reflect.Type, err error) error {
	hint := "pass a " + p.String()
	if convertible(raw, p) {
		hint += ", or add job.WithArgumentConversion() to the job to have " + snippet(raw) + " converted"
	}
	return fmt.Errorf("%w: argument %d is %T, executor wants %s: %v; %s", ErrInvalidArguments, i+1, a, p, err, hint)
}

// conversionError is the error of argument i (JSON raw) that does not
// convert to its parameter's type p.
func conversionError(i int, raw string, p reflect.Type, err error) error {
	if errors.Is(err, errNoConversion) {
		err = errors.New("only strings, numbers, bools and strings of JSON text convert (see job.WithArgumentConversion)")
	}
	return fmt.Errorf("%w: argument %d (%s) does not convert to the executor's parameter type %s: %v; pass a %s or a string holding one", ErrInvalidArguments, i+1, raw, p, err, p)
}

// sameBasicType reports whether a is a value of exactly t, and t is a
// predeclared string, bool, integer or float type: JSON that json.Marshal
// made of such a value always decodes into t, so checking it would find
// nothing.
func sameBasicType(a any, t reflect.Type) bool {
	if t.PkgPath() != "" || reflect.TypeOf(a) != t {
		return false
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

func (e *executor) checkCount(n int) error {
	want := len(e.params)
	if e.variadic {
		if n < want-1 {
			return fmt.Errorf("%w: %d arguments for executor %s, which needs at least %d", ErrInvalidArguments, n, e.typ, want-1)
		}
		return nil
	}
	if n != want {
		return fmt.Errorf("%w: %d arguments for executor %s, which takes %d", ErrInvalidArguments, n, e.typ, want)
	}
	return nil
}

// paramType is the type argument i decodes into.
func (e *executor) paramType(i int) reflect.Type {
	if e.variadic && i >= len(e.params)-1 {
		return e.params[len(e.params)-1].Elem()
	}
	return e.params[i]
}

func decodeArg(b []byte, t reflect.Type) (reflect.Value, error) {
	v := reflect.New(t)
	if err := json.Unmarshal(b, v.Interface()); err != nil {
		return reflect.Value{}, err
	}
	return v.Elem(), nil
}

// decodeArgs decodes stored arguments into values for the executor's
// parameters.
func (e *executor) decodeArgs(data []byte) ([]reflect.Value, error) {
	var raw []json.RawMessage
	if len(data) > 0 {
		if err := json.Unmarshal(data, &raw); err != nil {
			return nil, fmt.Errorf("%w: stored arguments are not a JSON array: %v", ErrInvalidArguments, err)
		}
	}
	if err := e.checkCount(len(raw)); err != nil {
		return nil, err
	}
	vals := make([]reflect.Value, len(raw))
	for i, r := range raw {
		p := e.paramType(i)
		v, err := decodeArg(r, p)
		if err != nil && e.convert {
			// Stored by a manager that could not convert it (one that
			// knows the kind by its definition only).
			var cerr error
			if _, v, cerr = convertDecode(r, p); cerr != nil {
				return nil, conversionError(i, snippet(r), p, cerr)
			}
			err = nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: stored argument %d cannot be decoded into %s: %v", ErrInvalidArguments, i+1, p, err)
		}
		vals[i] = v
	}
	return vals, nil
}

// call runs the executor with injected values and decoded arguments. A
// panic is recovered and returned as an error wrapping ErrPanic with the
// stack.
func (e *executor) call(ctx context.Context, inst Instance, args []reflect.Value) (results []any, err error) {
	in := make([]reflect.Value, 0, e.typ.NumIn()+len(args))
	for i := 0; i < e.typ.NumIn() && (i == e.injectCtx || i == e.injectInst); i++ {
		if i == e.injectCtx {
			in = append(in, reflect.ValueOf(&ctx).Elem())
		} else {
			in = append(in, reflect.ValueOf(&inst).Elem())
		}
	}
	in = append(in, args...)
	defer func() {
		if r := recover(); r != nil {
			results = nil
			err = fmt.Errorf("%w: %v\n%s", ErrPanic, r, debug.Stack())
		}
	}()
	out := e.fn.Call(in)
	if e.hasErr {
		if ev := out[len(out)-1]; !ev.IsNil() {
			err = ev.Interface().(error)
		}
		out = out[:len(out)-1]
	}
	if len(out) > 0 {
		results = make([]any, len(out))
		for i, o := range out {
			results[i] = o.Interface()
		}
	}
	return results, err
}

// encodeResults encodes results as a JSON array. A result that JSON cannot
// encode is stored as its fmt %v text, so the outcome is never lost.
func encodeResults(results []any) []byte {
	if len(results) == 0 {
		return nil
	}
	// Each element is json.Marshal's own output, compact and valid, so
	// the array is joined as is (marshalling a []json.RawMessage would
	// scan and compact every element again).
	out := []byte{'['}
	for i, r := range results {
		b, err := json.Marshal(r)
		if err != nil {
			b, _ = json.Marshal(fmt.Sprintf("%v", r))
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	return append(out, ']')
}

// decodeJSONArray decodes a stored JSON array into generic values (numbers
// as json.Number so large integers survive).
func decodeJSONArray(data []byte) ([]any, error) {
	if len(data) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out []any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// decodeInto decodes the stored JSON array data into ptrs, one per
// element; a nil entry skips its element. what names an element in errors
// ("argument", "result").
func decodeInto(data []byte, ptrs []any, what string) error {
	var raw []json.RawMessage
	if len(data) > 0 {
		if err := json.Unmarshal(data, &raw); err != nil {
			return fmt.Errorf("%w: stored %ss are not a JSON array: %v", ErrCorrupt, what, err)
		}
	}
	if len(raw) != len(ptrs) {
		return fmt.Errorf("the instance has %d %ss, %d pointers given; pass one pointer (or nil to skip) per %s", len(raw), what, len(ptrs), what)
	}
	for n, p := range ptrs {
		if p == nil {
			continue
		}
		if v := reflect.ValueOf(p); v.Kind() != reflect.Pointer || v.IsNil() {
			return fmt.Errorf("%s %d: got %T, want a non-nil pointer to decode into", what, n+1, p)
		}
		if err := json.Unmarshal(raw[n], p); err != nil {
			return fmt.Errorf("%s %d (%s) cannot be decoded into %T: %v", what, n+1, snippet(raw[n]), p, err)
		}
	}
	return nil
}

// snippet returns b for an error message, cut to 64 bytes.
func snippet(b []byte) string {
	if len(b) > 64 {
		return string(b[:61]) + "..."
	}
	return string(b)
}

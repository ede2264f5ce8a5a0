package wire

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// fill sets every exported field reachable from v to a value other than
// its zero value.
func fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(time.Unix(1_700_000_000, 123_456_789)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("s\x00é")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(-7_000_000_001 % (1 << (v.Type().Bits() - 2)))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), path)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(t, v.Index(i), path+"[]")
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, path+"{key}")
		fill(t, e, path+"{}")
		v.SetMapIndex(k, e)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				fill(t, v.Field(i), path+"."+f.Name)
			}
		}
	default:
		t.Fatalf("%s: no test value for a %s; extend fill", path, v.Type())
	}
}

// TestMsgpackRoundTrip: every field of what a session carries in Msgpack
// arrives as it left: a field added to one of these types later travels
// too, or this test names it.
func TestMsgpackRoundTrip(t *testing.T) {
	for _, v := range []any{
		&store.Instance{}, &store.ClaimParams{}, &ClaimResult{}, &store.FinishParams{}, &[]FinishResult{},
		&store.RenewParams{}, &store.RenewResult{}, &store.HeartbeatParams{}, &store.HeartbeatResult{},
		&store.RescueParams{}, &store.RescueNodesParams{}, &store.RescueNodesResult{},
		&[]*store.LogRecord{}, &store.ProgressParams{}, &SubscribeParams{},
	} {
		typ := reflect.TypeOf(v).Elem()
		t.Run(typ.String(), func(t *testing.T) {
			fill(t, reflect.ValueOf(v).Elem(), typ.String())
			b, err := MarshalMsgpack(v)
			if err != nil {
				t.Fatal(err)
			}
			got := reflect.New(typ)
			if err := UnmarshalMsgpack(b, got.Interface()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Interface(), v) {
				t.Fatalf("round trip changed the value:\n got %+v\nwant %+v", got.Elem().Interface(), reflect.ValueOf(v).Elem().Interface())
			}
		})
	}
}

// TestMsgpackBadParams: parameters that do not decode are refused with
// store.ErrInvalid, naming the problem, as in JSON.
func TestMsgpackBadParams(t *testing.T) {
	if _, err := DecodeMsgpack(MethodClaim, []byte{0xc1}); err == nil {
		t.Fatal("undecodable parameters accepted")
	} else if !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("got %v, want store.ErrInvalid", err)
	}
	if _, err := DecodeMsgpack("DropEverything", nil); !errors.Is(err, ErrUnknownMethod) {
		t.Fatalf("got %v, want ErrUnknownMethod", err)
	}
}

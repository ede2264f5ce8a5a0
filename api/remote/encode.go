package remote

import (
	"encoding/json"
	"fmt"
	"reflect"
	"unicode/utf8"

	"github.com/jobkit/job/store"
)

// encodeParams encodes a call's parameters as JSON. JSON cannot carry a
// string that is not valid UTF-8 (it would arrive changed), so such a
// string is refused here with store.ErrInvalid, as every store refuses it.
func encodeParams(method string, params any) ([]byte, error) {
	if path, bad := invalidUTF8(reflect.ValueOf(params), ""); bad {
		return nil, fmt.Errorf("%w: %s: %s is not valid UTF-8", store.ErrInvalid, method, path)
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: encode the parameters: %v", store.ErrInvalid, method, err)
	}
	return b, nil
}

// invalidUTF8 finds a string in v that is not valid UTF-8 and returns its
// path.
func invalidUTF8(v reflect.Value, path string) (string, bool) {
	switch v.Kind() {
	case reflect.String:
		return path, !utf8.ValidString(v.String())
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "", false
		}
		return invalidUTF8(v.Elem(), path)
	case reflect.Struct:
		t := v.Type()
		for i := range v.NumField() {
			if !t.Field(i).IsExported() {
				continue
			}
			if p, bad := invalidUTF8(v.Field(i), path+"."+t.Field(i).Name); bad {
				return p, true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "", false // bytes travel as base64
		}
		for i := range v.Len() {
			if p, bad := invalidUTF8(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); bad {
				return p, true
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if p, bad := invalidUTF8(it.Key(), path+"{key}"); bad {
				return p, true
			}
			if p, bad := invalidUTF8(it.Value(), fmt.Sprintf("%s[%v]", path, it.Key())); bad {
				return p, true
			}
		}
	}
	return "", false
}

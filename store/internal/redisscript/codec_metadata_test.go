package redisscript

import (
	"errors"
	"reflect"
	"testing"

	"github.com/jobkit/job/store"
)

// TestDecodeMetadata pins the spec's P_LABELS and P_META tail: metadata
// round-trips with and without labels, a spec written before metadata
// existed decodes with nil Metadata, and a tail that encodeFullSpec never
// writes is corrupt.
func TestDecodeMetadata(t *testing.T) {
	at := codecAt
	base := func() *store.Instance { in := codecInstance(); in.UpdatedAt = at; return in }
	for name, mod := range map[string]func(in *store.Instance){
		"none": func(in *store.Instance) {},
		"metadata only": func(in *store.Instance) {
			in.Metadata = map[string]string{"traceparent": "00-abc-def-01", "tracestate": ""}
		},
		"labels only": func(in *store.Instance) { in.Labels = []string{"gpu", "region=eu"} },
		"labels and metadata": func(in *store.Instance) {
			in.Labels = []string{"gpu"}
			in.Metadata = map[string]string{"k": "v\x00w", "é": "ü"}
		},
	} {
		in := base()
		mod(in)
		spec := encodeFullSpec(in, at)
		got, err := DecodeInstance(in.ID, spec, "")
		if err != nil || !reflect.DeepEqual(got, in) {
			t.Errorf("%s: DecodeInstance = %+v, %v; want %+v", name, got, err, in)
		}
	}

	// A spec of a version before metadata: fourteen values, or fifteen
	// with labels; Metadata stays nil.
	in := base()
	old := specOf(t, in.Seq, EncodeSpec(in), Micros(at), 0, 5)
	if got, err := DecodeInstance(in.ID, old, ""); err != nil || got.Metadata != nil {
		t.Errorf("old spec: DecodeInstance = %+v, %v; want nil Metadata", got, err)
	}
	old = specOf(t, in.Seq, EncodeSpec(in), Micros(at), 0, 5, "\x00gpu")
	if got, err := DecodeInstance(in.ID, old, ""); err != nil || got.Metadata != nil || !reflect.DeepEqual(got.Labels, []string{"gpu"}) {
		t.Errorf("old spec with labels: DecodeInstance = %+v, %v; want labels [gpu], nil Metadata", got, err)
	}

	for name, tail := range map[string][]any{
		"empty labels, no metadata": {""},
		"empty metadata":            {"", ""},
		"metadata with an odd key":  {"", pack(t, "k")},
		"metadata with empty key":   {"", pack(t, "", "v")},
		"metadata not strings":      {"", pack(t, 1, 2)},
		"metadata as a number":      {"", 7},
		"a value after metadata":    {"", pack(t, "k", "v"), "x"},
	} {
		spec := specOf(t, in.Seq, EncodeSpec(in), append([]any{Micros(at), 0, 5}, tail...)...)
		if got, err := DecodeInstance(in.ID, spec, ""); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%s: DecodeInstance = %+v, %v; want ErrCorrupt", name, got, err)
		}
	}
}

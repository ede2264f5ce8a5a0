package store

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Labels and label requirements.
//
// A node's labels (ClaimParams.Labels, NodeInfo.Labels) say what it is:
// each is "key=value" or a bare "key" (ValidateLabel).
//
// What an instance requires of the node that runs it (Instance.Labels,
// Definition.Labels) is a list of requirements, every one of which must
// hold (ValidateLabelRequirement, LabelsSatisfy). A requirement is one of:
//
//	key=value          equality: the node has the label key=value
//	key=v1|v2          set membership: the node has key=v1 or key=v2
//	key in (v1,v2)     the same, written as Kubernetes selectors write it
//	key!=value         the node has no label key=value (lacking key is fine)
//	key!=v1|v2         the node has neither key=v1 nor key=v2
//	key notin (v1,v2)  the same as key!=v1|v2
//	key                exists: the node has key, bare or with any value
//	!key               not exists: the node has no label key at all
//
// Keys and values are printable text without whitespace, commas, "=",
// "!", "|", "(" or ")"; a key is never empty, a value may be ("key="). The
// compact forms have no whitespace or commas, so they pass unquoted
// through comma-separated flags and lists; the "in"/"notin" forms are
// accepted as input and stored in the compact form ("region in (us,eu)"
// is kept as "region=eu|us", values sorted): NormLabels does that.
//
// The forms of before requirement expressions keep their meaning, with
// one widening: a bare "gpu" is now satisfied by a node labelled
// "gpu=a100" too (the key exists), where it once needed the bare label.

// LabelOp is the operator of a LabelRequirement.
type LabelOp uint8

// The label operators.
const (
	// LabelIn holds when the node has key=v for one of the values
	// ("key=v", "key=v1|v2", "key in (v1,v2)").
	LabelIn LabelOp = iota + 1
	// LabelNotIn holds when the node has key=v for none of the values
	// ("key!=v", "key!=v1|v2", "key notin (v1,v2)"); a node without key
	// satisfies it.
	LabelNotIn
	// LabelExists holds when the node has the key, bare or with any value
	// ("key").
	LabelExists
	// LabelNotExists holds when the node has no label with the key
	// ("!key").
	LabelNotExists
)

var labelOpNames = [...]string{LabelIn: "in", LabelNotIn: "notin", LabelExists: "exists", LabelNotExists: "!exists"}

// String returns the operator's name ("in", "notin", "exists", "!exists").
func (o LabelOp) String() string {
	if int(o) < len(labelOpNames) && labelOpNames[o] != "" {
		return labelOpNames[o]
	}
	return fmt.Sprintf("labelop(%d)", uint8(o))
}

// LabelRequirement is one parsed requirement (ParseLabelRequirement).
type LabelRequirement struct {
	Key string
	Op  LabelOp
	// Values of LabelIn and LabelNotIn: at least one, sorted, without
	// duplicates. Nil for LabelExists and LabelNotExists.
	Values []string
}

// reservedLabelRune reports the runes keys and values may not hold: the
// operators, list separators, whitespace and control characters.
func reservedLabelRune(r rune) bool {
	switch r {
	case '=', '!', '|', '(', ')', ',':
		return true
	}
	return unicode.IsSpace(r) || unicode.IsControl(r)
}

// checkLabelPart reports why part (a key when key is true, else a value)
// of label or requirement l is unusable, or nil.
func checkLabelPart(l, part string, key bool) error {
	what := "value"
	if key {
		what = "key"
		if part == "" {
			return fmt.Errorf("%w: label %q without a key; write \"key=value\" or \"key\"", ErrInvalid, l)
		}
	}
	if !utf8.ValidString(part) {
		return fmt.Errorf("%w: label %q is not valid UTF-8; use printable text", ErrInvalid, l)
	}
	if i := strings.IndexFunc(part, reservedLabelRune); i >= 0 {
		r, _ := utf8.DecodeRuneInString(part[i:])
		return fmt.Errorf("%w: label %q: %s %q holds %q; keys and values are printable text without whitespace, commas, control characters or any of = ! | ( )", ErrInvalid, l, what, part, r)
	}
	return nil
}

// ValidateLabel reports an unusable node label as ErrInvalid. A node label
// is "key=value" or a bare "key": a non-empty key, at most one "=", no
// whitespace, commas, control characters or any of "!|()" (the operators
// of requirements, see LabelRequirement), at most MaxLabelBytes. What an
// instance requires is checked by ValidateLabelRequirement instead.
func ValidateLabel(l string) error {
	if len(l) > MaxLabelBytes {
		return fmt.Errorf("%w: label of %d bytes; keep it within %d", ErrInvalid, len(l), MaxLabelBytes)
	}
	key, value, eq := strings.Cut(l, "=")
	if err := checkLabelPart(l, key, true); err != nil {
		return err
	}
	if eq {
		if strings.Contains(value, "=") {
			return fmt.Errorf("%w: label %q has more than one \"=\"; write \"key=value\"", ErrInvalid, l)
		}
		if err := checkLabelPart(l, value, false); err != nil {
			return err
		}
	}
	return nil
}

// ValidateLabels checks a node's (a claimer's) labels: each one as
// ValidateLabel does, at most MaxLabels of them.
func ValidateLabels(labels []string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%w: %d labels; at most %d", ErrInvalid, len(labels), MaxLabels)
	}
	for _, l := range labels {
		if err := ValidateLabel(l); err != nil {
			return err
		}
	}
	return nil
}

// ValidateLabelRequirement reports an unusable requirement as ErrInvalid,
// with a message that names the fix (see LabelRequirement for the forms).
func ValidateLabelRequirement(req string) error {
	_, err := ParseLabelRequirement(req)
	return err
}

// ValidateLabelRequirements checks what an instance requires: each
// requirement as ValidateLabelRequirement does, at most MaxLabels of them.
func ValidateLabelRequirements(reqs []string) error {
	if len(reqs) > MaxLabels {
		return fmt.Errorf("%w: %d label requirements; at most %d", ErrInvalid, len(reqs), MaxLabels)
	}
	for _, r := range reqs {
		if err := ValidateLabelRequirement(r); err != nil {
			return err
		}
	}
	return nil
}

// ParseLabelRequirement parses one requirement in any of the forms
// LabelRequirement lists. Malformed ones are ErrInvalid: an empty key, an
// empty value set, unbalanced parentheses, whitespace outside the
// "in"/"notin" form, reserved characters in a key or value.
func ParseLabelRequirement(req string) (LabelRequirement, error) {
	if len(req) > MaxLabelBytes {
		return LabelRequirement{}, fmt.Errorf("%w: label requirement of %d bytes; keep it within %d", ErrInvalid, len(req), MaxLabelBytes)
	}
	if strings.ContainsAny(req, "()") || strings.IndexFunc(req, unicode.IsSpace) >= 0 {
		return parseSetForm(req)
	}
	if key, ok := strings.CutPrefix(req, "!"); ok {
		if strings.Contains(key, "=") {
			return LabelRequirement{}, fmt.Errorf("%w: label requirement %q: \"!\" leads only a bare key (\"!gpu\": no label gpu); for not-equal write \"key!=value\"", ErrInvalid, req)
		}
		if err := checkLabelPart(req, key, true); err != nil {
			return LabelRequirement{}, err
		}
		return LabelRequirement{Key: key, Op: LabelNotExists}, nil
	}
	key, values, eq := strings.Cut(req, "=")
	if !eq {
		if err := checkLabelPart(req, key, true); err != nil {
			return LabelRequirement{}, err
		}
		return LabelRequirement{Key: key, Op: LabelExists}, nil
	}
	op := LabelIn
	if k, ok := strings.CutSuffix(key, "!"); ok {
		key, op = k, LabelNotIn
	}
	if err := checkLabelPart(req, key, true); err != nil {
		return LabelRequirement{}, err
	}
	if strings.Contains(values, "=") {
		return LabelRequirement{}, fmt.Errorf("%w: label requirement %q has more than one \"=\"; write \"key=value\" or \"key=v1|v2\"", ErrInvalid, req)
	}
	vals := strings.Split(values, "|")
	for _, v := range vals {
		if v == "" && len(vals) > 1 {
			return LabelRequirement{}, fmt.Errorf("%w: label requirement %q has an empty value in its set; write \"key=v1|v2\" with no empty member", ErrInvalid, req)
		}
		if err := checkLabelPart(req, v, false); err != nil {
			return LabelRequirement{}, err
		}
	}
	return LabelRequirement{Key: key, Op: op, Values: sortedSet(vals)}, nil
}

// parseSetForm parses "key in (v1,v2)" and "key notin (v1,v2)", with
// optional whitespace around the tokens.
func parseSetForm(req string) (LabelRequirement, error) {
	bad := func(why string) (LabelRequirement, error) {
		return LabelRequirement{}, fmt.Errorf("%w: label requirement %q: %s; write \"key in (v1,v2)\", \"key notin (v1,v2)\", or without spaces \"key=v1|v2\"", ErrInvalid, req, why)
	}
	open := strings.IndexByte(req, '(')
	if open < 0 {
		if strings.Contains(req, ")") {
			return bad("unbalanced parentheses: \")\" without \"(\"")
		}
		return bad("whitespace outside an \"in (...)\" set")
	}
	head := strings.Fields(req[:open])
	if len(head) != 2 || (head[1] != "in" && head[1] != "notin") {
		return bad("want a key, then \"in\" or \"notin\", before \"(\"")
	}
	rest := req[open+1:]
	closing := strings.IndexByte(rest, ')')
	if closing < 0 {
		return bad("unbalanced parentheses: \"(\" without \")\"")
	}
	inner := rest[:closing]
	switch {
	case strings.Contains(inner, "("):
		return bad("nested \"(\"")
	case strings.TrimSpace(rest[closing+1:]) != "":
		return bad("text after \")\"")
	case strings.TrimSpace(inner) == "":
		return bad("empty value set")
	}
	key := head[0]
	if err := checkLabelPart(req, key, true); err != nil {
		return LabelRequirement{}, err
	}
	var vals []string
	for v := range strings.SplitSeq(inner, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			return bad("empty value in the set")
		}
		if err := checkLabelPart(req, v, false); err != nil {
			return LabelRequirement{}, err
		}
		vals = append(vals, v)
	}
	op := LabelIn
	if head[1] == "notin" {
		op = LabelNotIn
	}
	return LabelRequirement{Key: key, Op: op, Values: sortedSet(vals)}, nil
}

func sortedSet(vals []string) []string {
	out := slices.Clone(vals)
	slices.Sort(out)
	return slices.Compact(out)
}

// String returns the requirement in its compact, stored form: "key",
// "!key", "key=v1|v2" or "key!=v1|v2", values sorted.
func (r LabelRequirement) String() string {
	switch r.Op {
	case LabelExists:
		return r.Key
	case LabelNotExists:
		return "!" + r.Key
	case LabelNotIn:
		return r.Key + "!=" + strings.Join(r.Values, "|")
	}
	return r.Key + "=" + strings.Join(r.Values, "|")
}

// Matches reports whether a node with the labels have satisfies r.
func (r LabelRequirement) Matches(have []string) bool {
	switch r.Op {
	case LabelExists:
		return hasLabelKey(have, r.Key)
	case LabelNotExists:
		return !hasLabelKey(have, r.Key)
	case LabelIn, LabelNotIn:
		found := slices.ContainsFunc(r.Values, func(v string) bool { return hasLabelValue(have, r.Key, v) })
		return found == (r.Op == LabelIn)
	}
	return false
}

// hasLabelKey reports whether have holds key bare or with a value.
func hasLabelKey(have []string, key string) bool {
	for _, h := range have {
		if h == key || len(h) > len(key) && h[len(key)] == '=' && h[:len(key)] == key {
			return true
		}
	}
	return false
}

// hasLabelValue reports whether have holds key=value.
func hasLabelValue(have []string, key, value string) bool {
	for _, h := range have {
		if len(h) == len(key)+1+len(value) && h[len(key)] == '=' && h[:len(key)] == key && h[len(key)+1:] == value {
			return true
		}
	}
	return false
}

// LabelRequirementHolds reports whether a node with the labels have
// satisfies the requirement req, in any form LabelRequirement lists. It
// reads the compact form without allocating (the set forms are parsed);
// this is the reference every store's claim follows. req is meant to be
// valid: stores hold only requirements Instance.Validate accepted, and
// what a malformed one yields is not specified (one with parentheses that
// does not parse holds for no node).
func LabelRequirementHolds(req string, have []string) bool {
	if strings.ContainsAny(req, "()") {
		r, err := ParseLabelRequirement(req)
		return err == nil && r.Matches(have)
	}
	if key, ok := strings.CutPrefix(req, "!"); ok {
		return key != "" && !hasLabelKey(have, key)
	}
	key, values, eq := strings.Cut(req, "=")
	if !eq {
		return key != "" && hasLabelKey(have, key)
	}
	neg := false
	if k, ok := strings.CutSuffix(key, "!"); ok {
		key, neg = k, true
	}
	if key == "" {
		return false
	}
	for v := range strings.SplitSeq(values, "|") {
		if hasLabelValue(have, key, v) {
			return !neg
		}
	}
	return neg
}

// LabelsSatisfy reports whether a node with the labels have satisfies
// every requirement in required (see LabelRequirement and
// LabelRequirementHolds); none required is satisfied by every node, a
// node without labels included.
func LabelsSatisfy(required, have []string) bool {
	for _, r := range required {
		if !LabelRequirementHolds(r, have) {
			return false
		}
	}
	return true
}

// UnmetLabels returns the requirements of required that a node with the
// labels have does not satisfy, in the order given (nil when it satisfies
// them all).
func UnmetLabels(required, have []string) []string {
	var out []string
	for _, r := range required {
		if !LabelRequirementHolds(r, have) {
			out = append(out, r)
		}
	}
	return out
}

// NormLabels returns labels (or requirements) in the form stores keep and
// compare: each requirement in its compact form (LabelRequirement.String;
// an unparsable one unchanged), sorted, without duplicates, nil for none.
// Two instances with the same requirements, written in any order or form,
// wait in the same lane. Node labels come back sorted and unchanged.
func NormLabels(labels []string) []string {
	if len(labels) == 0 {
		return nil
	}
	out := make([]string, len(labels))
	for i, l := range labels {
		out[i] = normLabel(l)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// normLabel returns the compact form of l; forms already compact (every
// node label, every requirement written without a set) come back as they
// are, without parsing.
func normLabel(l string) string {
	if !strings.ContainsAny(l, "|(") {
		return l
	}
	r, err := ParseLabelRequirement(l)
	if err != nil {
		return l
	}
	return r.String()
}

package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"strings"
)

// jsonOpenDepth is how deep a JSON tree starts unfolded: the levels below
// start folded (a click unfolds them).
const jsonOpenDepth = 3

// jsonTree renders JSON text as a tree of <details> elements, each object
// and array foldable, keys, strings, numbers, booleans and null in classes
// of their own (j-key, j-str, j-num, j-bool, j-null), its keys in their
// order. Text that is not one JSON value is shown as it is, in a <pre>.
func jsonTree(id, s string) template.HTML {
	var b strings.Builder
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	fmt.Fprintf(&b, `<div class="json" id="%s">`, template.HTMLEscapeString(id))
	if err := writeJSON(&b, dec, 0); err != nil || dec.More() {
		return template.HTML(fmt.Sprintf(`<pre id="%s">%s</pre>`, template.HTMLEscapeString(id), template.HTMLEscapeString(s))) //nolint:gosec // escaped
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return template.HTML(fmt.Sprintf(`<pre id="%s">%s</pre>`, template.HTMLEscapeString(id), template.HTMLEscapeString(s))) //nolint:gosec // escaped
	}
	b.WriteString(`</div>`)
	return template.HTML(b.String()) //nolint:gosec // every string in it is escaped
}

// writeJSON writes the next value of dec at depth.
func writeJSON(b *strings.Builder, dec *json.Decoder, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		closer, unit := "}", "key"
		if t == '[' {
			closer, unit = "]", "item"
		}
		var inner strings.Builder
		n := 0
		for dec.More() {
			inner.WriteString(`<li>`)
			if t == '{' {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ := k.(string)
				fmt.Fprintf(&inner, `<span class="j-key">%s</span>: `, template.HTMLEscapeString(quoteJSON(key)))
			}
			if err := writeJSON(&inner, dec, depth+1); err != nil {
				return err
			}
			inner.WriteString(`</li>`)
			n++
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return err
		}
		if n == 0 {
			fmt.Fprintf(b, `<span class="j-punct">%s%s</span>`, string(t), closer)
			return nil
		}
		open := ""
		if depth < jsonOpenDepth {
			open = " open"
		}
		plural := "s"
		if n == 1 {
			plural = ""
		}
		fmt.Fprintf(b, `<details%s><summary><span class="j-punct">%s</span><span class="j-count">%d %s%s</span></summary><ul>%s</ul><span class="j-punct">%s</span></details>`,
			open, string(t), n, unit, plural, inner.String(), closer)
	case string:
		fmt.Fprintf(b, `<span class="j-str">%s</span>`, template.HTMLEscapeString(quoteJSON(t)))
	case json.Number:
		fmt.Fprintf(b, `<span class="j-num">%s</span>`, template.HTMLEscapeString(t.String()))
	case bool:
		fmt.Fprintf(b, `<span class="j-bool">%t</span>`, t)
	case nil:
		b.WriteString(`<span class="j-null">null</span>`)
	}
	return nil
}

// rawJSON is s indented, for copying; anything not JSON as it is.
func rawJSON(s string) string {
	var out bytes.Buffer
	if json.Indent(&out, []byte(s), "", "  ") != nil {
		return s
	}
	return out.String()
}

// quoteJSON is s as a JSON string, with <, > and & as they are (the page
// escapes them).
func quoteJSON(s string) string {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(out.String(), "\n")
}

package benchkit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
)

// The generated part of doc/benchmarks.md lies between these lines.
const (
	BeginMarker = "<!-- bench:begin -->"
	EndMarker   = "<!-- bench:end -->"
)

// WriteBetweenMarkers replaces what lies between BeginMarker and EndMarker
// in the file at path with body, keeping everything outside them. A file
// that does not exist is created with a title and the markers; a file
// without the markers gets them appended.
func WriteBetweenMarkers(path, title, body string) error {
	old, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		old = []byte("# " + title + "\n\n" + BeginMarker + "\n" + EndMarker + "\n")
	} else if err != nil {
		return err
	}
	b := bytes.Index(old, []byte(BeginMarker))
	e := bytes.Index(old, []byte(EndMarker))
	if b < 0 || e < 0 || e < b {
		if b >= 0 || e >= 0 {
			return fmt.Errorf("%s: the markers %s and %s are broken; fix them by hand", path, BeginMarker, EndMarker)
		}
		old = append(old, []byte("\n"+BeginMarker+"\n"+EndMarker+"\n")...)
		b = bytes.Index(old, []byte(BeginMarker))
		e = bytes.Index(old, []byte(EndMarker))
	}
	var out bytes.Buffer
	out.Write(old[:b+len(BeginMarker)])
	out.WriteString("\n")
	out.WriteString(body)
	if len(body) > 0 && body[len(body)-1] != '\n' {
		out.WriteString("\n")
	}
	out.Write(old[e:])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

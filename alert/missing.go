package alert

import (
	"errors"
	"fmt"

	"github.com/jobkit/job/store"
)

// missingError is a rule, silence, channel or incident that is not
// stored, named as its user knows it rather than as the store keeps it
// (a document of a collection). It is both ErrUnknown and
// store.ErrNotFound.
type missingError struct{ what, name string }

func (m *missingError) Error() string {
	return fmt.Sprintf("alert: %s %q does not exist; list the %ss to see their names", m.what, m.name, m.what)
}

func (m *missingError) Is(target error) bool {
	return target == ErrUnknown || target == store.ErrNotFound
}

// docErr is the error of a read or delete of the document of a rule,
// silence, channel or incident: one that is not stored is a missingError,
// another error names op.
func docErr(op, what, name string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return &missingError{what, name}
	}
	if op != "" {
		op += " "
	}
	return fmt.Errorf("alert: %s%s %q: %w", op, what, name, err)
}

// Package secrets resolves the secrets that executor configs name by
// reference ("secret_ref": "hook-key"): a definition stored as data never
// holds a secret's value, and each node resolves the name from its own
// configuration (a directory of files, environment variables, a map).
package secrets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNotFound is the error of a name the resolver does not know.
var ErrNotFound = errors.New("secrets: no such secret")

// ErrInvalidName is the error of a name that is empty, over 128 bytes or
// holds anything but letters, digits, '-', '_' and '.' (or starts with '.').
var ErrInvalidName = errors.New("secrets: invalid secret name")

// Resolver returns the value of the secret name.
type Resolver func(name string) ([]byte, error)

// CheckName reports a name a Resolver refuses.
func CheckName(name string) error {
	if name == "" || len(name) > 128 || name[0] == '.' {
		return fmt.Errorf("%w %q: want 1 to 128 of letters, digits, '-', '_', '.', not starting with '.'", ErrInvalidName, name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%w %q: want 1 to 128 of letters, digits, '-', '_', '.', not starting with '.'", ErrInvalidName, name)
		}
	}
	return nil
}

// Dir resolves a name to the contents of the file of that name in dir,
// trailing newline removed (as `echo secret > dir/name` writes it).
func Dir(dir string) Resolver {
	return func(name string) ([]byte, error) {
		if err := CheckName(name); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			return nil, &notFoundError{name, "create the file " + filepath.Join(dir, name)}
		}
		if err != nil {
			return nil, fmt.Errorf("secrets: read %q: %w", name, err)
		}
		return []byte(strings.TrimRight(string(b), "\r\n")), nil
	}
}

// Env resolves a name to the environment variable prefix + the name in
// upper case with '-' and '.' as '_' ("hook-key" with prefix
// "JOBD_SECRET_" is JOBD_SECRET_HOOK_KEY).
func Env(prefix string) Resolver {
	return func(name string) ([]byte, error) {
		if err := CheckName(name); err != nil {
			return nil, err
		}
		v := prefix + strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(name))
		s, ok := os.LookupEnv(v)
		if !ok || s == "" {
			return nil, &notFoundError{name, "set the environment variable " + v}
		}
		return []byte(s), nil
	}
}

// Map resolves names from m.
func Map(m map[string]string) Resolver {
	return func(name string) ([]byte, error) {
		if err := CheckName(name); err != nil {
			return nil, err
		}
		s, ok := m[name]
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
		}
		return []byte(s), nil
	}
}

// Chain tries each resolver in turn and returns the first value found; a
// name none knows is ErrNotFound, with a message naming every place the
// resolvers looked (the file of Dir, the variable of Env). Nil resolvers
// are skipped.
func Chain(rs ...Resolver) Resolver {
	return func(name string) ([]byte, error) {
		if err := CheckName(name); err != nil {
			return nil, err
		}
		var fixes []string
		for _, r := range rs {
			if r == nil {
				continue
			}
			v, err := r(name)
			if err == nil {
				return v, nil
			}
			if !errors.Is(err, ErrNotFound) {
				return nil, err
			}
			if nf := (*notFoundError)(nil); errors.As(err, &nf) && nf.fix != "" {
				fixes = append(fixes, nf.fix)
			}
		}
		if len(fixes) == 0 {
			return nil, &notFoundError{name, "give it to this node (a file in its secrets directory or an environment variable)"}
		}
		return nil, &notFoundError{name, strings.Join(fixes, ", or ")}
	}
}

// notFoundError is ErrNotFound for a name, naming where it was looked for
// as the fix ("set the environment variable JOBD_SECRET_HOOK_KEY").
type notFoundError struct {
	name string
	fix  string
}

func (e *notFoundError) Error() string {
	return fmt.Sprintf("%v: %q; %s", ErrNotFound, e.name, e.fix)
}

func (e *notFoundError) Unwrap() error { return ErrNotFound }

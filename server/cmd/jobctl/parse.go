package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	job "github.com/jobkit/job"
)

// parseStates reads --state values: state names as jobctl prints them
// (created, scheduled, processing, completed, terminated, canceled,
// timedout), each flag value possibly a comma-separated list; "failed"
// means terminated and timedout.
func parseStates(vals []string) ([]job.State, error) {
	var out []job.State
	for _, v := range vals {
		for _, name := range strings.Split(v, ",") {
			name = strings.ToLower(strings.TrimSpace(name))
			switch name {
			case "":
				continue
			case "failed":
				out = append(out, job.Terminated, job.TimedOut)
				continue
			case "timed_out", "timed-out":
				name = "timedout"
			case "cancelled":
				name = "canceled"
			}
			s, err := parseState(name)
			if err != nil {
				return nil, usagef("--state %q: want created, scheduled, processing, completed, terminated, canceled, timedout or failed", name)
			}
			out = append(out, s)
		}
	}
	return out, nil
}

func parseState(name string) (job.State, error) {
	for s := job.Created; s <= job.TimedOut; s++ {
		if s.String() == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("unknown state %q", name)
}

// parseLevels reads --level values: debug, info, warn, error.
func parseLevels(vals []string) ([]job.LogLevel, error) {
	var out []job.LogLevel
	for _, v := range vals {
		for _, name := range strings.Split(v, ",") {
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" {
				continue
			}
			found := false
			for _, l := range []job.LogLevel{job.LogDebug, job.LogInfo, job.LogWarn, job.LogError} {
				if l.String() == name {
					out, found = append(out, l), true
				}
			}
			if !found {
				return nil, usagef("--level %q: want debug, info, warn or error", name)
			}
		}
	}
	return out, nil
}

// parseWhen reads a time flag: RFC 3339 ("2026-11-23T21:00:00Z"), or a
// duration meaning that long before now ("90m").
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usagef("--%s %q: want an RFC 3339 time (2026-11-23T21:00:00Z) or a duration ago (90m)", flag, s)
}

// parsePairs reads k=v flag values into a map.
func parsePairs(flag string, vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(vals))
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, usagef("--%s %q: want key=value", flag, v)
		}
		m[k] = val
	}
	return m, nil
}

// argsValue reads an --args value: the JSON array itself, "@FILE" to read
// it from a file, or "@-" from standard input, for arguments too large
// for a command line ("Argument list too long" past the system's limit).
func argsValue(v string, stdin io.Reader) (string, error) {
	name, ok := strings.CutPrefix(v, "@")
	if !ok {
		return v, nil
	}
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(name)
	}
	if err != nil {
		return "", usagef("--args %s: %v", v, err)
	}
	return strings.TrimSpace(string(b)), nil
}

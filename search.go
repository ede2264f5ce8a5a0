package job

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jobkit/job/store"
)

// DefaultSearchScan is how many instances one SearchInstances call reads
// at most when SearchParams.ScanLimit is 0; MaxSearchScan is the largest
// ScanLimit it takes.
const (
	DefaultSearchScan = 10_000
	MaxSearchScan     = 100_000
)

// SearchParams is what SearchInstances looks for among the instances its
// query selects, and how far it reads.
type SearchParams struct {
	// Text is found, ignoring case, in an instance's arguments or result
	// (their JSON text as stored: a string argument is found by its
	// characters, a quote in it by \") or its error message. "" matches
	// every instance.
	Text string
	// Match, when set, must also accept an instance (a filter the store
	// cannot apply, such as required labels).
	Match func(*InstanceInfo) bool
	// ScanLimit is how many instances one call reads at most before it
	// returns what it found with a cursor to continue. Defaults to
	// DefaultSearchScan; at most MaxSearchScan.
	ScanLimit int
}

// SearchPage is what one SearchInstances call found.
type SearchPage struct {
	// Items are the matches, newest first, at most the query's limit;
	// Next continues the search after the last instance read (pass it to
	// WithQueryCursor with the same query and params), "" when every
	// instance the query selects has been searched.
	Page[*InstanceInfo]
	// Scanned is how many instances this call read.
	Scanned int
}

// SearchInstances finds, among the instances q selects (kind, queue,
// states, creation time: what the store selects by), those whose
// arguments, result or error contain p.Text, newest first. The store
// cannot search text, so this reads the selection a page at a time in
// the engine and tests each instance: a call stops when it has q's limit
// of matches (DefaultPageSize when q sets none) or has read p.ScanLimit
// instances, and its Next continues from the last instance read. The
// first read takes twice the page size (at least 100), the next ones
// MaxPageSize, so a call costs at most one page read more than
// ScanLimit/MaxPageSize, whatever the store holds; a rare text in a large selection takes several calls (each
// returning Scanned and Next, so a caller can say "searched N so far").
// Narrow q (kind, states, time range) to make a search short.
func (m *Manager) SearchInstances(ctx context.Context, q *Query, p SearchParams) (*SearchPage, error) {
	size := DefaultPageSize
	if q != nil && q.q.Limit != 0 {
		size = q.q.Limit
	}
	if size < 0 || size > MaxPageSize {
		return nil, fmt.Errorf("%w: search page size %d; ask for 1 to %d matches and follow Next", ErrInvalidOption, size, MaxPageSize)
	}
	budget := p.ScanLimit
	switch {
	case budget == 0:
		budget = DefaultSearchScan
	case budget < 0 || budget > MaxSearchScan:
		return nil, fmt.Errorf("%w: search scan limit %d; use 1 to %d (0 for %d) and follow Next", ErrInvalidOption, budget, MaxSearchScan, DefaultSearchScan)
	}
	sq, err := q.store()
	if err != nil {
		return nil, err
	}
	needle := foldNeedle(p.Text)
	match := func(r *store.Instance, ji *InstanceInfo) bool {
		if needle != nil && !containsFold(r.Args, needle) && !containsFold(r.Result, needle) && !containsFold([]byte(r.Error), needle) {
			return false
		}
		return p.Match == nil || p.Match(ji)
	}
	out := &SearchPage{}
	var corrupt error
	// The first read is small: when matches come early (a selective store
	// filter, a common text) the store reads little, which matters where
	// a read walks an index until it is full (memdb's states across
	// kinds). The next reads take MaxPageSize: where each read costs about
	// the same whatever its size (Redis reads every instance of the
	// cursor's second), fewer reads are cheaper.
	chunk := min(max(2*size, 100), MaxPageSize)
	for {
		read := *sq
		read.Limit = min(chunk, budget-out.Scanned)
		chunk = MaxPageSize
		pg, err := m.store.PageInstances(ctx, &read)
		if pg == nil {
			return nil, pageErr("instances", err)
		}
		if err != nil {
			corrupt = err // undecodable records: the page holds the rest
		}
		for i, r := range pg.Instances {
			ji := newInfo(r)
			if !match(r, ji) {
				continue
			}
			out.Items = append(out.Items, ji)
			if len(out.Items) < size {
				continue
			}
			out.Scanned += i + 1
			out.Next = pg.Next
			if i < len(pg.Instances)-1 {
				// Continue right after this match, not after the page.
				if out.Next, err = m.cursorAfter(ctx, &read, r.ID, i+1); err != nil {
					return nil, err
				}
			}
			return out, pageErr("instances", corrupt)
		}
		out.Scanned += len(pg.Instances)
		if pg.Next == "" || out.Scanned >= budget {
			out.Next = pg.Next
			return out, pageErr("instances", corrupt)
		}
		sq.Cursor = pg.Next
	}
}

// cursorAfter returns the cursor of the position right after instance id,
// the n-th instance of the page read selects: the page is read again with
// limit n. Should instances be added or removed in between, the read is
// repeated with id's new place (a removed id ends after the n-th).
func (m *Manager) cursorAfter(ctx context.Context, read *store.Query, id string, n int) (string, error) {
	again := *read
	var next string
	for range 3 {
		again.Limit = n
		pg, err := m.store.PageInstances(ctx, &again)
		if pg == nil {
			return "", pageErr("instances", err)
		}
		next = pg.Next
		at := -1
		for i, r := range pg.Instances {
			if r.ID == id {
				at = i
			}
		}
		if at < 0 || at == len(pg.Instances)-1 {
			return next, nil
		}
		n = at + 1
	}
	return next, nil
}

// foldNeedle returns text lower-cased for containsFold, or nil for "".
func foldNeedle(text string) []byte {
	if text == "" {
		return nil
	}
	return []byte(strings.ToLower(text))
}

// containsFold reports whether hay contains needle (lower case), ignoring
// case: ASCII without allocating, other text through bytes.ToLower.
func containsFold(hay, needle []byte) bool {
	if len(hay) < len(needle) {
		return false
	}
	if !isASCII(needle) {
		return bytes.Contains(bytes.ToLower(hay), needle)
	}
	first := needle[0]
	for i := 0; i+len(needle) <= len(hay); i++ {
		if lowerASCII(hay[i]) != first {
			continue
		}
		j := 1
		for j < len(needle) && lowerASCII(hay[i+j]) == needle[j] {
			j++
		}
		if j == len(needle) {
			return true
		}
	}
	return false
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

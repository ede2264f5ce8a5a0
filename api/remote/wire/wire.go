// Package wire is the encoding of the store contract (package store) on
// the jobkit.v1 ExecutorService: which methods exist, how their parameters
// and results travel (JSON of the store package's own Go types, with every
// error field carried as a StoreError), and how errors keep their
// sentinels across the network, so that errors.Is(err, store.ErrNotFound)
// holds on the worker exactly as it would against a local store.
//
// Both ends use it: package remote (the worker's store.Store) encodes
// calls and decodes replies; jobd decodes calls, applies them to its
// namespace's store (Apply) and encodes the replies.
package wire

import (
	"context"
	"errors"
	"time"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// The store methods that travel on a worker's session stream rather than
// as unary calls: what the engine calls on its hot path and what names the
// worker's node as owner.
const (
	MethodClaim       = "Claim"
	MethodRenew       = "Renew"
	MethodFinish      = "Finish"
	MethodHeartbeat   = "Heartbeat"
	MethodRescue      = "Rescue"
	MethodRescueNodes = "RescueNodes"
	MethodAppendLogs  = "AppendLogs"
	MethodSetProgress = "SetProgress"
	// MethodSubscribe (a session call of a pull-only worker, not a store
	// method: its parameters are a SubscribeParams) makes jobd forward
	// the store's wake-ups of a queue as Wake messages; jobd answers once
	// it follows them.
	MethodSubscribe = "Subscribe"
)

// SubscribeParams are the parameters of MethodSubscribe.
type SubscribeParams struct {
	Queue string
}

// ErrUnknownMethod: a call names no method of the store contract.
var ErrUnknownMethod = errors.New("remote: unknown store method")

// sentinels names the errors that keep their identity on the wire.
var sentinels = []struct {
	name string
	err  error
}{
	{"not_found", store.ErrNotFound},
	{"duplicate", store.ErrDuplicate},
	{"lease_lost", store.ErrLeaseLost},
	{"finished", store.ErrFinished},
	{"not_finished", store.ErrNotFinished},
	{"invalid", store.ErrInvalid},
	{"corrupt", store.ErrCorrupt},
	{"too_large", store.ErrTooLarge},
	{"full", store.ErrFull},
	{"conflict", store.ErrConflict},
	{"cursor_expired", store.ErrCursorExpired},
	{"outcome_unknown", store.ErrOutcomeUnknown},
	{"canceled", context.Canceled},
	{"deadline_exceeded", context.DeadlineExceeded},
}

// EncodeError returns err as a StoreError naming every sentinel it wraps;
// nil for nil.
func EncodeError(err error) *jobkitv1.StoreError {
	if err == nil {
		return nil
	}
	e := &jobkitv1.StoreError{Message: err.Error()}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			e.Sentinels = append(e.Sentinels, s.name)
		}
	}
	return e
}

// DecodeError returns the error a StoreError describes: its message, and
// errors.Is true for each sentinel it names. nil for nil.
func DecodeError(e *jobkitv1.StoreError) error {
	if e == nil {
		return nil
	}
	r := &remoteError{msg: e.GetMessage()}
	for _, name := range e.GetSentinels() {
		for _, s := range sentinels {
			if s.name == name {
				r.is = append(r.is, s.err)
			}
		}
	}
	return r
}

// remoteError is an error that came over the wire.
type remoteError struct {
	msg string
	is  []error
}

func (e *remoteError) Error() string { return e.msg }

// Unwrap returns the sentinels the error wrapped on the other side.
func (e *remoteError) Unwrap() []error { return e.is }

// Err is an error as JSON carries it inside a result (an EnqueueResult's
// Err, a FinishResult's Err...).
type Err struct {
	Message   string   `json:"message"`
	Sentinels []string `json:"sentinels,omitempty"`
}

func encodeErr(err error) *Err {
	e := EncodeError(err)
	if e == nil {
		return nil
	}
	return &Err{Message: e.Message, Sentinels: e.Sentinels}
}

func (e *Err) decode() error {
	if e == nil {
		return nil
	}
	return DecodeError(&jobkitv1.StoreError{Message: e.Message, Sentinels: e.Sentinels})
}

// EnqueueResult is store.EnqueueResult on the wire.
type EnqueueResult struct {
	ID      string
	Seq     uint64
	Existed bool `json:",omitempty"`
	Err     *Err `json:",omitempty"`
}

// FinishResult is store.FinishResult on the wire.
type FinishResult struct {
	State store.State
	Err   *Err `json:",omitempty"`
}

// AdminResult is store.AdminResult on the wire.
type AdminResult struct {
	ID    string
	State store.State
	Err   *Err `json:",omitempty"`
}

// Undecodable is store.UndecodableRecord on the wire.
type Undecodable struct {
	store.LeaseRef
	Err *Err
}

// ClaimResult is store.ClaimResult on the wire.
type ClaimResult struct {
	Instances   []*store.Instance
	NextRunAt   time.Time
	Undecodable []Undecodable `json:",omitempty"`
	// Limited is store.ClaimResult.Limited.
	Limited bool `json:",omitempty"`
	// RetryAfter is store.ClaimResult.RetryAfter.
	RetryAfter time.Duration `json:",omitempty"`
}

// Event is store.Event on the wire.
type Event struct {
	store.Event
	Err *Err `json:",omitempty"`
}

// Store returns r as the store package has it.
func (r EnqueueResult) Store() store.EnqueueResult {
	return store.EnqueueResult{ID: r.ID, Seq: r.Seq, Existed: r.Existed, Err: r.Err.decode()}
}

// Store returns r as the store package has it.
func (r FinishResult) Store() store.FinishResult {
	return store.FinishResult{State: r.State, Err: r.Err.decode()}
}

// Store returns r as the store package has it.
func (r AdminResult) Store() store.AdminResult {
	return store.AdminResult{ID: r.ID, State: r.State, Err: r.Err.decode()}
}

// Store returns r as the store package has it (nil for nil).
func (r *ClaimResult) Store() *store.ClaimResult {
	if r == nil {
		return nil
	}
	out := &store.ClaimResult{Instances: r.Instances, NextRunAt: r.NextRunAt, Limited: r.Limited, RetryAfter: r.RetryAfter}
	for _, u := range r.Undecodable {
		out.Undecodable = append(out.Undecodable, store.UndecodableRecord{LeaseRef: u.LeaseRef, Err: u.Err.decode()})
	}
	return out
}

// EncodeEvent returns e as it travels.
func EncodeEvent(e store.Event) Event {
	out := Event{Event: e, Err: encodeErr(e.Err)}
	out.Event.Err = nil
	return out
}

// Store returns e as the store package has it.
func (e Event) Store() store.Event {
	out := e.Event
	out.Err = e.Err.decode()
	return out
}

// Document is store.Document on the wire: its Body as bytes (base64), not
// as a JSON value, so it arrives byte for byte (encoding/json compacts a
// json.RawMessage) and a missing body stays missing.
type Document struct {
	Collection           string
	Name                 string
	Body                 []byte
	Version              int64
	CreatedAt, UpdatedAt time.Time
}

// EncodeDocument returns d as it travels (nil for nil).
func EncodeDocument(d *store.Document) *Document {
	if d == nil {
		return nil
	}
	return &Document{Collection: d.Collection, Name: d.Name, Body: d.Body, Version: d.Version, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
}

// Store returns d as the store package has it (nil for nil).
func (d *Document) Store() *store.Document {
	if d == nil {
		return nil
	}
	return &store.Document{Collection: d.Collection, Name: d.Name, Body: d.Body, Version: d.Version, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
}

// DocumentPage is store.DocumentPage on the wire.
type DocumentPage struct {
	Documents []*Document
	Next      string
}

// PutDocument is store.PutDocumentParams on the wire (Body as bytes, as
// in Document).
type PutDocument struct {
	Collection string
	Name       string
	Body       []byte
	IfVersion  int64
	Now        time.Time
}

// EncodePutDocument returns p as it travels (nil for nil).
func EncodePutDocument(p *store.PutDocumentParams) *PutDocument {
	if p == nil {
		return nil
	}
	return &PutDocument{Collection: p.Collection, Name: p.Name, Body: p.Body, IfVersion: p.IfVersion, Now: p.Now}
}

// Store returns p as the store package has it (nil for nil).
func (p *PutDocument) Store() *store.PutDocumentParams {
	if p == nil {
		return nil
	}
	return &store.PutDocumentParams{Collection: p.Collection, Name: p.Name, Body: p.Body, IfVersion: p.IfVersion, Now: p.Now}
}

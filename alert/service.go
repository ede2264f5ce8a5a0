package alert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/webhook"
)

// The collections alerting keeps.
const (
	colRules         = "alert-rules"
	colSilences      = "alert-silences"
	colChannels      = "alert-channels"
	colChannelStatus = "alert-channel-status"
	colIncidents     = "alert-incidents"
	colNotifications = "alert-notifications"
	colOutbox        = "alert-outbox"
	colState         = "alert-state"
)

// Clock tells the time; tests give a clock they move by hand.
type Clock interface {
	Now() time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Observer is told what alerting does, for metrics. Its methods must not
// block. The Prometheus exporter (module metrics) implements it.
type Observer interface {
	// AlertFired: an incident of rule (watching condition) opened; called
	// once in the cluster, by the evaluator that opened it.
	AlertFired(namespace, rule, condition string)
	// DeliveryFailed: an attempt to deliver to channel (of type typ)
	// failed.
	DeliveryFailed(namespace, channel, typ string)
	// Delivered: a notification reached channel.
	Delivered(namespace, channel, typ string)
}

// ChannelObserver is an Observer that is also told of each channel the
// service knows, before its first notification: those stored when Run
// starts and at each of its steps, and those stored through the service
// at once. Metrics use it to show a channel's delivery series at 0 from
// the start, so an alert on their increase sees the first failure.
type ChannelObserver interface {
	Observer
	// ChannelKnown: the channel exists (it may be called again for it).
	ChannelKnown(namespace, channel, typ string)
}

// Config configures a Service.
type Config struct {
	// Namespace is the namespace served, named in notifications and
	// console links. Defaults to "default".
	Namespace string
	// Store is the namespace's store: the evaluator follows its events and
	// reads its counts, lag, triggers, nodes and definitions, and its
	// documents (store.Documents) keep the rules, silences, channels,
	// incidents, notifications and the evaluator's state. Required.
	Store store.Store
	// Node names this process in delivery claims. Required.
	Node string
	// Clock defaults to the wall clock.
	Clock Clock
	// ConsoleURL is the console's base address ("https://jobd.example/console"),
	// for the links in notifications; empty leaves them out.
	ConsoleURL string
	// Guard decides which addresses webhook and chat channels may reach,
	// by the webhook executor's rules: loopback, link-local and private
	// addresses are refused (when a channel is stored, and again at each
	// connection) unless its Allow names them. Nil is the zero Guard,
	// which allows public addresses only.
	Guard *webhook.Guard
	// KindKnown reports a kind this node knows of besides those the store
	// has seen (registered on its manager); nil knows none.
	KindKnown func(kind string) bool
	// Observer is told what alerting does; nil means none.
	Observer Observer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Interval is how often the evaluator evaluates. Defaults to 1 s.
	Interval time.Duration
	// MaxAttempts bounds the deliveries of one notification. Defaults to 8.
	MaxAttempts int
	// RetryBase and RetryMax bound the backoff between deliveries: RetryBase
	// doubled at each failure, at most RetryMax. Default 1 s and 5 min.
	RetryBase, RetryMax time.Duration
	// SendTimeout bounds one delivery attempt. Defaults to 10 s.
	SendTimeout time.Duration
	// HistoryRetain is how long notifications stay in the history.
	// Defaults to 30 days.
	HistoryRetain time.Duration
}

// Service is alerting for one namespace: the stored rules, silences,
// channels, incidents and notification history, and (Run) the evaluator
// and the deliverer. Every jobd runs one per namespace on the shared
// store; they need no leader.
type Service struct {
	cfg    Config
	log    *slog.Logger
	ev     *evaluator
	client *http.Client // through cfg.Guard
}

// New checks cfg and returns a Service.
func New(cfg Config) (*Service, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("alert: Config.Store is nil; give the namespace's store")
	case cfg.Node == "":
		return nil, errors.New("alert: Config.Node is empty; give the node's ID")
	case cfg.Interval < 0 || cfg.MaxAttempts < 0 || cfg.RetryBase < 0 || cfg.RetryMax < 0 || cfg.SendTimeout < 0:
		return nil, errors.New("alert: a negative Interval, MaxAttempts, RetryBase, RetryMax or SendTimeout; use 0 for the default")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 8
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = time.Second
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = 5 * time.Minute
	}
	if cfg.SendTimeout == 0 {
		cfg.SendTimeout = 10 * time.Second
	}
	if cfg.HistoryRetain <= 0 {
		cfg.HistoryRetain = 30 * 24 * time.Hour
	}
	if cfg.Guard == nil {
		cfg.Guard = &webhook.Guard{}
	}
	cfg.ConsoleURL = strings.TrimRight(cfg.ConsoleURL, "/")
	s := &Service{cfg: cfg, log: cfg.Logger, client: cfg.Guard.Client(cfg.SendTimeout)}
	s.ev = newEvaluator(s)
	return s, nil
}

// Namespace returns the namespace the Service serves.
func (s *Service) Namespace() string { return s.cfg.Namespace }

func (s *Service) now() time.Time { return s.cfg.Clock.Now() }

// getDoc reads a document into v and returns its version.
func (s *Service) getDoc(ctx context.Context, col, name string, v any) (*store.Document, error) {
	d, err := s.cfg.Store.GetDocument(ctx, col, name)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(d.Body, v); err != nil {
		return nil, fmt.Errorf("alert: %s %q: %w: %v", col, name, store.ErrCorrupt, err)
	}
	return d, nil
}

// putDoc writes v as a document if ifVersion holds.
func (s *Service) putDoc(ctx context.Context, col, name string, v any, ifVersion int64) (*store.Document, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("alert: encode %s %q: %w", col, name, err)
	}
	return s.cfg.Store.PutDocument(ctx, &store.PutDocumentParams{
		Collection: col, Name: name, Body: b, IfVersion: ifVersion, Now: s.now(),
	})
}

// listDocs reads a whole collection (the small ones: rules, silences,
// channels, incidents, outbox), calling fn for each document.
func (s *Service) listDocs(ctx context.Context, col string, fn func(*store.Document) error) error {
	after := ""
	for {
		p, err := s.cfg.Store.ListDocuments(ctx, &store.ListDocumentsParams{Collection: col, After: after})
		if err != nil {
			return err
		}
		for _, d := range p.Documents {
			if err := fn(d); err != nil {
				return err
			}
		}
		if p.Next == "" || len(p.Documents) == 0 {
			return nil
		}
		after = p.Next
	}
}

func decodeAll[T any](ctx context.Context, s *Service, col string, set func(*T, *store.Document)) ([]*T, error) {
	var out []*T
	err := s.listDocs(ctx, col, func(d *store.Document) error {
		v := new(T)
		if err := json.Unmarshal(d.Body, v); err != nil {
			s.log.Warn("alert: an undecodable document is left out", "collection", col, "name", d.Name, "err", err)
			return nil
		}
		set(v, d)
		out = append(out, v)
		return nil
	})
	return out, err
}

// PutRule stores r after checking it and the names it references: its
// kind, trigger or queue must be known in the namespace and its channels
// stored (ErrUnknown naming what is missing). ifVersion is 0 to create,
// the stored Version to replace, store.AnyVersion for either. Nothing is
// stored when an error is returned.
func (s *Service) PutRule(ctx context.Context, r *Rule, ifVersion int64) (*Rule, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := s.checkRefs(ctx, r); err != nil {
		return nil, err
	}
	d, err := s.putDoc(ctx, colRules, r.Name, r, ifVersion)
	if err != nil {
		return nil, fmt.Errorf("alert: put rule %q: %w", r.Name, err)
	}
	out := *r
	out.Version, out.CreatedAt, out.UpdatedAt = d.Version, d.CreatedAt, d.UpdatedAt
	s.ev.wake()
	return &out, nil
}

// checkRefs reports a kind, trigger, queue or channel r names that the
// namespace does not have.
func (s *Service) checkRefs(ctx context.Context, r *Rule) error {
	st := s.cfg.Store
	switch {
	case r.Kind != "":
		ok, err := s.kindKnown(ctx, r.Kind)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: rule %q: kind %q is not known in namespace %q (no definition, no instance, no node runs it); define it first or fix the name", ErrUnknown, r.Name, r.Kind, s.cfg.Namespace)
		}
	case r.Trigger != "":
		if _, err := store.TriggersIn(st).GetTrigger(ctx, r.Trigger); errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: rule %q: trigger %q does not exist in namespace %q; create it first or fix the name", ErrUnknown, r.Name, r.Trigger, s.cfg.Namespace)
		} else if err != nil {
			return fmt.Errorf("alert: rule %q: read trigger %q: %w", r.Name, r.Trigger, err)
		}
	case r.Queue != "":
		ok, err := s.queueKnown(ctx, r.Queue)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: rule %q: queue %q is not known in namespace %q (no definition, instance or node uses it); fix the name", ErrUnknown, r.Name, r.Queue, s.cfg.Namespace)
		}
	}
	for _, c := range r.Channels {
		if _, err := s.cfg.Store.GetDocument(ctx, colChannels, c); errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: rule %q: channel %q does not exist; create it first or fix the name", ErrUnknown, r.Name, c)
		} else if err != nil {
			return fmt.Errorf("alert: rule %q: read channel %q: %w", r.Name, c, err)
		}
	}
	return nil
}

// kindKnown reports whether the namespace knows kind: a stored
// definition, instances of it, a node that runs it, or the node's own
// registration.
func (s *Service) kindKnown(ctx context.Context, kind string) (bool, error) {
	if s.cfg.KindKnown != nil && s.cfg.KindKnown(kind) {
		return true, nil
	}
	st := s.cfg.Store
	if _, err := st.GetDefinition(ctx, kind); err == nil {
		return true, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("alert: read definition %q: %w", kind, err)
	}
	rows, err := st.Counts(ctx, &store.CountsParams{Kind: kind})
	if err != nil {
		return false, fmt.Errorf("alert: counts of kind %q: %w", kind, err)
	}
	if len(rows) > 0 {
		return true, nil
	}
	return s.anyNode(ctx, func(n *store.NodeInfo) bool { return slices.Contains(n.Kinds, kind) })
}

// anyNode reports whether a node of the registry (live, or dead for less
// than deadAfter) satisfies has.
func (s *Service) anyNode(ctx context.Context, has func(*store.NodeInfo) bool) (bool, error) {
	nodes, err := s.cfg.Store.ListNodes(ctx, &store.ListNodesParams{Now: s.now(), DeadAfter: deadAfter})
	if err != nil {
		return false, fmt.Errorf("alert: list nodes: %w", err)
	}
	return slices.ContainsFunc(nodes, has), nil
}

// queueKnown reports whether the namespace knows queue: instances in it,
// a node that claims from it, or a definition that names it.
func (s *Service) queueKnown(ctx context.Context, queue string) (bool, error) {
	st := s.cfg.Store
	rows, err := st.Counts(ctx, &store.CountsParams{Queue: queue})
	if err != nil {
		return false, fmt.Errorf("alert: counts of queue %q: %w", queue, err)
	}
	if len(rows) > 0 {
		return true, nil
	}
	if ok, err := s.anyNode(ctx, func(n *store.NodeInfo) bool { return slices.Contains(n.Queues, queue) }); ok || err != nil {
		return ok, err
	}
	after := ""
	for {
		defs, err := st.ListDefinitions(ctx, &store.ListDefinitionsParams{After: after, Limit: store.MaxDefinitionsPage})
		if err != nil {
			return false, fmt.Errorf("alert: list definitions: %w", err)
		}
		for _, d := range defs {
			if d.Queue == queue {
				return true, nil
			}
		}
		if len(defs) < store.MaxDefinitionsPage {
			return false, nil
		}
		after = defs[len(defs)-1].Kind
	}
}

// deadAfter is the dead threshold the evaluator lists nodes with: the
// engine's default.
const deadAfter = time.Second

// GetRule returns the rule of that name, or store.ErrNotFound.
func (s *Service) GetRule(ctx context.Context, name string) (*Rule, error) {
	r := new(Rule)
	d, err := s.getDoc(ctx, colRules, name, r)
	if err != nil {
		return nil, docErr("", "rule", name, err)
	}
	r.Version, r.CreatedAt, r.UpdatedAt = d.Version, d.CreatedAt, d.UpdatedAt
	return r, nil
}

// ListRules returns every rule, in name order.
func (s *Service) ListRules(ctx context.Context) ([]*Rule, error) {
	return decodeAll(ctx, s, colRules, func(r *Rule, d *store.Document) {
		r.Version, r.CreatedAt, r.UpdatedAt = d.Version, d.CreatedAt, d.UpdatedAt
	})
}

// DeleteRule removes a rule (only that Version when ifVersion is not 0);
// its open incidents resolve at the next evaluation.
func (s *Service) DeleteRule(ctx context.Context, name string, ifVersion int64) error {
	if err := s.cfg.Store.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: colRules, Name: name, IfVersion: ifVersion}); err != nil {
		return docErr("delete", "rule", name, err)
	}
	s.ev.wake()
	return nil
}

// PutSilence stores a silence after checking it: its rule must be stored
// or its kind known (ErrUnknown). ifVersion as for PutRule.
func (s *Service) PutSilence(ctx context.Context, sl *Silence, ifVersion int64) (*Silence, error) {
	if err := sl.Validate(s.now()); err != nil {
		return nil, err
	}
	if sl.Rule != "" {
		if _, err := s.cfg.Store.GetDocument(ctx, colRules, sl.Rule); errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%w: silence %q: rule %q does not exist; fix the name", ErrUnknown, sl.Name, sl.Rule)
		} else if err != nil {
			return nil, fmt.Errorf("alert: silence %q: read rule %q: %w", sl.Name, sl.Rule, err)
		}
	} else {
		ok, err := s.kindKnown(ctx, sl.Kind)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: silence %q: kind %q is not known in namespace %q; fix the name", ErrUnknown, sl.Name, sl.Kind, s.cfg.Namespace)
		}
	}
	d, err := s.putDoc(ctx, colSilences, sl.Name, sl, ifVersion)
	if err != nil {
		return nil, fmt.Errorf("alert: put silence %q: %w", sl.Name, err)
	}
	out := *sl
	out.Version, out.CreatedAt, out.UpdatedAt = d.Version, d.CreatedAt, d.UpdatedAt
	return &out, nil
}

// ListSilences returns every stored silence (ended ones too, until they
// are deleted), in name order.
func (s *Service) ListSilences(ctx context.Context) ([]*Silence, error) {
	return decodeAll(ctx, s, colSilences, func(v *Silence, d *store.Document) {
		v.Version, v.CreatedAt, v.UpdatedAt = d.Version, d.CreatedAt, d.UpdatedAt
	})
}

// DeleteSilence removes a silence.
func (s *Service) DeleteSilence(ctx context.Context, name string, ifVersion int64) error {
	if err := s.cfg.Store.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: colSilences, Name: name, IfVersion: ifVersion}); err != nil {
		return docErr("delete", "silence", name, err)
	}
	return nil
}

// PutChannel stores a channel after checking it, its address against the
// node's rules (Config.CheckURL), and (Email) that its secret references
// are well-formed. ifVersion as for PutRule.
func (s *Service) PutChannel(ctx context.Context, c *Channel, ifVersion int64) (*Channel, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.URL != "" {
		if err := s.checkURL(c.URL); err != nil {
			return nil, fmt.Errorf("%w: channel %q: %w", ErrInvalid, c.Name, err)
		}
	}
	d, err := s.putDoc(ctx, colChannels, c.Name, c, ifVersion)
	if err != nil {
		return nil, fmt.Errorf("alert: put channel %q: %w", c.Name, err)
	}
	if co, ok := s.cfg.Observer.(ChannelObserver); ok {
		co.ChannelKnown(s.cfg.Namespace, c.Name, string(c.Type))
	}
	out := *c
	out.Version, out.CreatedAt, out.UpdatedAt = d.Version, d.CreatedAt, d.UpdatedAt
	return &out, nil
}

// checkURL refuses an address the Guard forbids: by its scheme and, for
// an IP address or a name that resolves, by where it leads (a name that
// does not resolve now is decided when a notification is sent).
func (s *Service) checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if err := s.cfg.Guard.CheckURL(u); err != nil {
		return err
	}
	if _, err := netip.ParseAddr(u.Hostname()); err == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
	if err != nil {
		return nil // unreachable now; the guard decides at each send
	}
	for _, a := range addrs {
		if err := s.cfg.Guard.CheckAddr(u.Hostname(), a.Unmap()); err != nil {
			return err
		}
	}
	return nil
}

// GetChannel returns the channel of that name, or store.ErrNotFound.
func (s *Service) GetChannel(ctx context.Context, name string) (*Channel, error) {
	c := new(Channel)
	d, err := s.getDoc(ctx, colChannels, name, c)
	if err != nil {
		return nil, docErr("", "channel", name, err)
	}
	c.Version, c.CreatedAt, c.UpdatedAt = d.Version, d.CreatedAt, d.UpdatedAt
	return c, nil
}

// announceChannels tells a ChannelObserver of every stored channel.
func (s *Service) announceChannels(ctx context.Context) error {
	co, ok := s.cfg.Observer.(ChannelObserver)
	if !ok {
		return nil
	}
	chs, err := s.ListChannels(ctx)
	if err != nil {
		return err
	}
	for _, c := range chs {
		co.ChannelKnown(s.cfg.Namespace, c.Name, string(c.Type))
	}
	return nil
}

// ListChannels returns every channel, in name order.
func (s *Service) ListChannels(ctx context.Context) ([]*Channel, error) {
	return decodeAll(ctx, s, colChannels, func(v *Channel, d *store.Document) {
		v.Version, v.CreatedAt, v.UpdatedAt = d.Version, d.CreatedAt, d.UpdatedAt
	})
}

// ErrInUse is the error of deleting a channel that rules still notify.
var ErrInUse = errors.New("alert: in use")

// DeleteChannel removes a channel that no rule names (ErrInUse naming the
// rules otherwise).
func (s *Service) DeleteChannel(ctx context.Context, name string, ifVersion int64) error {
	rules, err := s.ListRules(ctx)
	if err != nil {
		return err
	}
	var users []string
	for _, r := range rules {
		if slices.Contains(r.Channels, name) {
			users = append(users, r.Name)
		}
	}
	if len(users) > 0 {
		return fmt.Errorf("%w: channel %q is notified by rule %s; take it out of them first", ErrInUse, name, strings.Join(users, ", "))
	}
	if err := s.cfg.Store.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: colChannels, Name: name, IfVersion: ifVersion}); err != nil {
		return docErr("delete", "channel", name, err)
	}
	return nil
}

// ChannelStatus returns how a channel's deliveries went (a zero status
// when it never delivered).
func (s *Service) ChannelStatus(ctx context.Context, name string) (*ChannelStatus, error) {
	st := &ChannelStatus{Name: name}
	if _, err := s.getDoc(ctx, colChannelStatus, name, st); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("alert: channel %q status: %w", name, err)
	}
	return st, nil
}

// ListIncidents returns the incidents in the given state (all when
// empty), most recently opened first.
func (s *Service) ListIncidents(ctx context.Context, state IncidentState) ([]*Incident, error) {
	all, err := decodeAll(ctx, s, colIncidents, func(v *Incident, d *store.Document) { v.Version = d.Version })
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, in := range all {
		if state == "" || in.State == state {
			out = append(out, in)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].OpenedAt.After(out[j].OpenedAt) })
	return out, nil
}

// GetIncident returns the incident of that ID, or store.ErrNotFound.
func (s *Service) GetIncident(ctx context.Context, id string) (*Incident, error) {
	in := new(Incident)
	d, err := s.getDoc(ctx, colIncidents, id, in)
	if err != nil {
		return nil, docErr("", "incident", id, err)
	}
	in.Version = d.Version
	return in, nil
}

// NotificationPage is one page of the notification history.
type NotificationPage struct {
	Notifications []*Notification
	// Next is the cursor of the next page; empty on the last.
	Next string
}

// ListNotifications returns a page of the notification history, newest
// first, starting after cursor (a previous page's Next), at most limit
// (0: the store's default page). incident, when set, keeps only that
// incident's.
func (s *Service) ListNotifications(ctx context.Context, cursor string, limit int, incident string) (*NotificationPage, error) {
	out := &NotificationPage{}
	after := cursor
	for {
		p, err := s.cfg.Store.ListDocuments(ctx, &store.ListDocumentsParams{Collection: colNotifications, After: after, Limit: limit})
		if err != nil {
			return nil, fmt.Errorf("alert: list notifications: %w", err)
		}
		for _, d := range p.Documents {
			n := new(Notification)
			if err := json.Unmarshal(d.Body, n); err != nil {
				continue
			}
			n.Version = d.Version
			if incident == "" || n.Incident == incident {
				out.Notifications = append(out.Notifications, n)
			}
			out.Next = d.Name
		}
		if p.Next == "" || len(p.Documents) == 0 {
			out.Next = ""
			return out, nil
		}
		if incident == "" || len(out.Notifications) > 0 {
			out.Next = p.Next
			return out, nil
		}
		after = p.Next
	}
}

func decodeInto(d *store.Document, v any) error { return json.Unmarshal(d.Body, v) }

package console

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

//go:embed web/templates/*.html web/static
var webFS embed.FS

// fragmentHeader marks a live-update request: the console answers with the
// page's main content only.
const fragmentHeader = "X-Jobkit-Fragment"

// configHeader carries, on a live refresh's answer, the digest of the
// configuration the content was read after (see session.config).
const configHeader = "X-Jobkit-Config"

// pageNames are the pages, each web/templates/<name>.html defining
// "content" inside web/templates/layout.html.
var pageNames = []string{"overview", "signin", "queues", "instances", "instance", "jobs", "nodes", "confirm", "error",
	"calendars", "calendar", "alerts", "incident", "trigger", "definition", "series"}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"ts": func(t *timestamppb.Timestamp) string {
		if t == nil || (t.Seconds == 0 && t.Nanos == 0) {
			return ""
		}
		return t.AsTime().UTC().Format(time.RFC3339)
	},
	"tsText": func(t *timestamppb.Timestamp) string {
		if t == nil || (t.Seconds == 0 && t.Nanos == 0) {
			return "—"
		}
		return t.AsTime().UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"dur": func(d *durationpb.Duration) string {
		if d == nil {
			return "—"
		}
		return d.AsDuration().Round(time.Millisecond).String()
	},
	"state":  stateName,
	"states": func() []string { return stateNames[1:] },
	// short is the random tail of a UUIDv7 (its head is a timestamp, the
	// same for instances made together).
	"short": func(id string) string {
		if len(id) > 12 {
			return "…" + id[len(id)-12:]
		}
		return id
	},
	"final": func(s pb.State) bool { return s >= pb.State_STATE_COMPLETED },
	// pct is a progress fraction as a whole percentage ("42").
	"pct": func(f float64) string { return strconv.FormatFloat(f*100, 'f', 0, 64) },
	"level": func(l pb.LogLevel) string {
		return strings.ToLower(strings.TrimPrefix(l.String(), "LOG_LEVEL_"))
	},
	"nodeStatus": func(s pb.NodeStatus) string {
		return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_STATUS_"))
	},
	"has": func(list []string, s string) bool {
		for _, v := range list {
			if v == s {
				return true
			}
		}
		return false
	},
}

// stateNames are the states' names in the console and its URLs, indexed by
// pb.State.
var stateNames = []string{"", "created", "scheduled", "processing", "completed", "terminated", "canceled", "timed_out"}

// stateName names a state.
func stateName(s pb.State) string {
	if int(s) < len(stateNames) && s > 0 {
		return stateNames[s]
	}
	return "unknown"
}

// parsePages parses every page with the layout.
func parsePages() (map[string]*template.Template, error) {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(webFS, "web/templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("console: parsing the layout: %w", err)
	}
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.Must(layout.Clone()).ParseFS(webFS, "web/templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parsing page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// view is what every page template gets.
type view struct {
	Title  string
	Prefix string
	Page   string // the page's name, for the navigation
	Flash  string
	// The signed-in user; empty on the sign-in page.
	Signed     bool
	Role       string
	Operator   bool // may act as an operator (or more)
	Admin      bool
	NS         string
	Namespaces []string
	CSRF       string
	Data       any
}

// render writes page name with data: the whole page, or only its content
// for a live update.
func (c *Console) render(w http.ResponseWriter, r *http.Request, s *session, name string, status int, data any) {
	v := view{Title: c.cfg.Title, Prefix: c.prefix, Page: name, Data: data}
	if s != nil {
		v.Signed, v.Role, v.NS, v.Namespaces, v.CSRF = true, s.id.role.String(), s.ns, s.id.namespaces, s.csrf
		v.Operator, v.Admin = s.can(roleOperator), s.can(roleAdmin)
	}
	tmpl := "layout.html"
	if r.Header.Get(fragmentHeader) != "" {
		tmpl = "content"
		if s != nil && s.config != "" {
			// Read again after the content: when it moved meanwhile, the
			// content may show either side of the change, and a tag no
			// digest has makes the page refresh at the next check.
			tag := s.config
			if d, err := s.configDigest(r.Context()); err != nil || digestTag(d) != tag {
				tag = "unsettled"
			}
			w.Header().Set(configHeader, tag)
		}
	} else {
		v.Flash = c.takeFlash(w, r)
	}
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, tmpl, v); err != nil {
		c.cfg.Logger.Error("jobkit console: rendering a page", "page", name, "err", err)
		http.Error(w, "the console could not render this page; see its log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail shows an API error as a page with the status it maps to and the
// server's message, which names the fix.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	status := http.StatusBadGateway
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodePermissionDenied:
			status = http.StatusForbidden
		case connect.CodeUnauthenticated:
			status = http.StatusUnauthorized
		case connect.CodeNotFound:
			status = http.StatusNotFound
		case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeAlreadyExists, connect.CodeOutOfRange:
			status = http.StatusBadRequest
		}
	}
	c.render(w, r, s, "error", status, map[string]any{"Status": status, "Message": apiMessage(err)})
}

// apiMessage is an API error's message without the code prefix, with
// the console's own fix where the API's names an API call (ErrorFix).
func apiMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return fmt.Sprintf("%s (%s)", consoleFix(ce), ce.Code())
	}
	return err.Error()
}

// consoleFix is ce's message with the fix a console user takes in the
// place of the one it names for an API caller.
func consoleFix(ce *connect.Error) string {
	msg := ce.Message()
	for _, d := range ce.Details() {
		v, err := d.Value()
		f, ok := v.(*pb.ErrorFix)
		if err != nil || !ok || f.GetFix() == "" {
			continue
		}
		switch f.GetReason() {
		case "unknown_kind":
			msg = strings.Replace(msg, f.GetFix(), "define it on the Executors page (a job made of data), or start a worker that registers it", 1)
		}
	}
	return msg
}

// routes registers every page and action.
func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(webFS, "web/static")
	fileServer := http.StripPrefix("/static/", http.FileServerFS(static))
	m.Handle("GET /static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		fileServer.ServeHTTP(w, r)
	}))
	m.HandleFunc("GET /{$}", c.overviewPage)
	m.HandleFunc("GET /signin", c.signInPage)
	m.HandleFunc("POST /signin", c.signIn)
	m.HandleFunc("POST /signout", c.signOut)
	m.HandleFunc("POST /namespace", c.switchNamespace)
	m.HandleFunc("GET /events", c.events)
	m.HandleFunc("GET /queues", c.queuesPage)
	m.HandleFunc("POST /queues/{name}/{action}", c.queueAction)
	m.HandleFunc("GET /queues/{name}", c.seriesPage("queue"))
	m.HandleFunc("GET /kinds/{name}", c.seriesPage("kind"))
	m.HandleFunc("GET /instances", c.instancesPage)
	m.HandleFunc("POST /instances/bulk", c.bulkAction)
	m.HandleFunc("POST /instances/selected", c.selectedAction)
	m.HandleFunc("GET /instances/{id}", c.instancePage)
	m.HandleFunc("POST /instances/{id}/{action}", c.instanceAction)
	m.HandleFunc("GET /jobs", c.jobsPage)
	m.HandleFunc("POST /schedule", c.schedule)
	m.HandleFunc("POST /triggers", c.createTrigger)
	m.HandleFunc("GET /triggers/preview", c.triggerPreview)
	m.HandleFunc("POST /triggers/{name}/{action}", c.triggerAction)
	m.HandleFunc("GET /triggers/{name}/edit", c.triggerEditPage)
	m.HandleFunc("POST /triggers/{name}/edit", c.updateTrigger)
	m.HandleFunc("GET /definitions/{kind}/edit", c.definitionEditPage)
	m.HandleFunc("POST /definitions/{kind}/edit", c.updateDefinition)
	m.HandleFunc("GET /nodes", c.nodesPage)
	// Calendars (calendars.go).
	m.HandleFunc("GET /calendars", c.calendarsPage)
	m.HandleFunc("POST /calendars", c.createCalendar)
	m.HandleFunc("POST /calendars/import", c.importCalendar)
	m.HandleFunc("GET /calendars/{name}", c.calendarPage)
	m.HandleFunc("POST /calendars/{name}/{action}", c.calendarAction)
	c.alertRoutes(m) // issue 23
	// Executor definitions (issue 22, executors.go).
	c.executorRoutes(m)
	c.workflowRoutes(m) // issue 35, workflows.go
	c.limitRoutes(m)    // issue 36, limits.go
	c.mux = m
}

package jobd

import (
	"context"
	"fmt"
	"sync"

	"github.com/jobkit/job"
	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/webhook"
)

// alerting is the alert.Service of each namespace (issue 23) and the
// goroutines that run them.
type alerting struct {
	byNS   map[string]*alert.Service
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// checkAlertFlags reports a bad alerting flag.
func (c *Config) checkAlertFlags() (*webhook.Guard, error) {
	if c.AlertInterval <= 0 {
		return nil, usagef("--alert-interval %v: want a positive duration such as 1s", c.AlertInterval)
	}
	allow, err := webhook.ParseAllowlist(c.AlertAllow...)
	if err != nil {
		return nil, usagef("--alert-allow: %v", err)
	}
	return &webhook.Guard{Allow: allow, AllowName: "jobd's --alert-allow"}, nil
}

// startAlerts makes each namespace's alerting on its store and runs its
// evaluator and deliverer until stop is called. With --alerts=false it
// makes none (the API answers FailedPrecondition).
func (d *daemon) startAlerts(ctx context.Context, obs alert.Observer) (*alerting, error) {
	c := d.cfg
	a := &alerting{byNS: map[string]*alert.Service{}}
	if !c.Alerts {
		return a, nil
	}
	guard, err := c.checkAlertFlags()
	if err != nil {
		return nil, err
	}
	for ns, m := range d.managers {
		st := d.stores.byNS[ns]
		svc, err := alert.New(alert.Config{
			Namespace: ns, Store: st, Node: m.NodeID(), ConsoleURL: c.AlertConsoleURL,
			Guard: guard, KindKnown: registered(m), Observer: obs, Interval: c.AlertInterval,
			Logger: d.mlog.With("component", "alerts", "namespace", ns),
		})
		if err != nil {
			return nil, fmt.Errorf("namespace %q: alerting: %w", ns, err)
		}
		a.byNS[ns] = svc
	}
	var runCtx context.Context
	runCtx, a.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, svc := range a.byNS {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			_ = svc.Run(runCtx)
		}()
	}
	return a, nil
}

// stop ends the evaluators and deliverers (a delivery in flight is
// abandoned: its claim lapses and another jobd sends it).
func (a *alerting) stop() {
	if a == nil || a.cancel == nil {
		return
	}
	a.cancel()
	a.wg.Wait()
}

// registered reports the kinds m runs itself.
func registered(m *job.Manager) func(string) bool {
	return func(kind string) bool {
		_, err := m.GetJob(kind)
		return err == nil
	}
}

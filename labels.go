package job

import (
	"fmt"

	"github.com/jobkit/job/store"
)

// WithLabels sets the manager's labels ("region=eu", or a bare "gpu"). The
// manager claims an instance only when its labels include every label the
// instance requires (see WithRequiredLabels); an instance that requires
// none is claimed by any manager. Defaults to none. Each label is
// "key=value" or a bare "key" (store.ValidateLabel).
func WithLabels(labels ...string) ManagerOption {
	return func(c *config) error {
		if err := store.ValidateLabels(labels); err != nil {
			return fmt.Errorf("%w: WithLabels: %w", ErrInvalidOption, err)
		}
		c.labels = store.NormLabels(labels)
		return nil
	}
}

// WithRequiredLabels sets the labels a manager must have (WithLabels) to
// run the job's instances, such as "region=eu" or "gpu". Instances of the
// job wait, Scheduled, until a manager with every one of them claims them;
// they are never failed for want of one. Defaults to none: any manager
// that registered the kind runs them.
func WithRequiredLabels(labels ...string) JobOption {
	return jobOption(func(j *Job) error {
		if err := store.ValidateLabels(labels); err != nil {
			return fmt.Errorf("%w: WithRequiredLabels: %w", ErrInvalidJob, err)
		}
		j.labels = store.NormLabels(labels)
		return nil
	})
}

// Labels returns the manager's labels (WithLabels), sorted.
func (m *Manager) Labels() []string { return append([]string(nil), m.cfg.labels...) }

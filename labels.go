package job

import (
	"fmt"

	"github.com/jobkit/job/store"
)

// WithLabels sets the manager's labels ("region=eu", or a bare "gpu"). The
// manager claims an instance only when its labels satisfy every
// requirement of the instance (see WithRequiredLabels); an instance that
// requires none is claimed by any manager. Defaults to none. Each label is
// "key=value" or a bare "key" without the operators of requirements
// (store.ValidateLabel).
func WithLabels(labels ...string) ManagerOption {
	return func(c *config) error {
		if err := store.ValidateLabels(labels); err != nil {
			return fmt.Errorf("%w: WithLabels: %w", ErrInvalidOption, err)
		}
		c.labels = store.NormLabels(labels)
		return nil
	}
}

// WithRequiredLabels sets the label requirements a manager's labels
// (WithLabels) must satisfy to run the job's instances, every one of them:
//
//	"region=eu"                      equality
//	"region=eu|us", "region in (eu,us)"  set membership
//	"region!=eu", "region notin (eu,us)" not equal / not in the set
//	"gpu"                            the manager has label gpu (bare or with a value)
//	"!gpu"                           the manager has no label gpu
//
// (store.LabelRequirement documents the forms; they are kept in the
// compact one, "region=eu|us"). Instances of the job wait, Scheduled,
// until a manager that satisfies them claims them; they are never failed
// for want of one (Manager.ExplainWaiting says why one waits). Defaults
// to none: any manager that registered the kind runs them. A malformed
// requirement (an empty key or value set, unbalanced parentheses,
// reserved characters) is ErrInvalidJob.
func WithRequiredLabels(labels ...string) JobOption {
	return jobOption(func(j *Job) error {
		if err := store.ValidateLabelRequirements(labels); err != nil {
			return fmt.Errorf("%w: WithRequiredLabels: %w", ErrInvalidJob, err)
		}
		j.labels = store.NormLabels(labels)
		return nil
	})
}

// Labels returns the manager's labels (WithLabels), sorted.
func (m *Manager) Labels() []string { return append([]string(nil), m.cfg.labels...) }

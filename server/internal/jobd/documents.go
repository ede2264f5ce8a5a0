package jobd

import (
	"errors"

	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/store"
)

// documentsOf returns the documents of a namespace's store, where alerting
// keeps its rules, incidents and history.
func documentsOf(st store.Store) (alert.Documents, error) {
	if d, ok := st.(alert.Documents); ok {
		return d, nil
	}
	return nil, errors.New("the store keeps no documents yet (store.Documents); run jobd with --alerts=false")
}

package job

import "github.com/jobkit/job/store"

// Page is one page of a collection that grows: instances, history, logs,
// definitions, triggers, calendars. Items are in the collection's order
// (each List method says which); Next is the cursor of the following page,
// "" when this page is the last. Pass Next back as the call's cursor
// (WithQueryCursor for instances, history and logs; the cursor argument of
// Admin.ListDefinitions, ListTriggers and ListCalendars) to read on.
type Page[T any] struct {
	Items []T
	Next  string
}

// HistoryRecord is one state transition of one instance, as history keeps
// it.
type HistoryRecord = store.HistoryRecord

// LagResult is what Admin.GetLag measures: the wait of the oldest ready
// instance of every queue and kind.
type LagResult = store.LagResult

// Trigger is a stored trigger: a cron or interval schedule of a kind that
// any scheduler node fires (see Admin.PutTrigger).
type Trigger = store.Trigger

// Calendar is a stored calendar that shapes triggers (see
// Admin.PutCalendar).
type Calendar = store.Calendar

// NodeInfo is one node of the store's registry (see Admin.ListNodes).
type NodeInfo = store.NodeInfo

package console

import "time"

// NewStatsAt returns a Stats on the clock now, for tests.
func NewStatsAt(now func() time.Time) *Stats { return &Stats{now: now} }

// SetLagEvery sets how often Follow samples the lag, for tests.
func (s *Stats) SetLagEvery(d time.Duration) { s.lagEvery = d }

// MinuteFigures is minuteFigures, for tests.
type MinuteFigures = minuteFigures

// LastHour returns s.lastHour(), for tests.
func (s *Stats) LastHour() []MinuteFigures { return s.lastHour() }

// Following returns a channel closed once Follow's first feed is open.
func (s *Stats) Following() <-chan struct{} { return s.opened() }

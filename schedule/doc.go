// Package schedule is the arithmetic of jobkit's schedules: cron and
// interval specs (Spec), and calendars that shape them (Rules): which
// days are working days in a time zone, and what a tick on a day off
// does under a Policy.
//
// It holds no state but a cache of parsed cron specs and imports nothing
// of jobkit: the store keeps triggers and calendars as data
// (store.Trigger, store.Calendar) and checks them with this package; the
// engine, the server and the tools compute fire times with it.
//
//	spec := schedule.Spec{Cron: "0 9 * * *", TimeZone: "Europe/Paris", Calendar: "fr", Policy: schedule.NextWorkday}
//	rules, err := schedule.NewRules("fr", "Europe/Paris", []time.Weekday{time.Monday, ...}, holidays)
//	next, err := spec.Next(time.Now(), rules)
package schedule

package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/schedule"
	"github.com/jobkit/job/store"
)

// paris is a Monday-to-Friday calendar in Europe/Paris with Armistice
// Day 2026 off and Christmas off every year.
func paris() *store.Calendar {
	return &store.Calendar{
		Name:     "fr",
		TimeZone: "Europe/Paris",
		Workdays: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday},
		Dates: []schedule.Date{
			{Date: "2026-11-11", Name: "Armistice"},
			{Date: "2020-12-25", Name: "Christmas", Yearly: true},
		},
	}
}

func TestCalendarTriggerValidate(t *testing.T) {
	bad := []*store.Trigger{
		{Name: "t", Kind: "k", Cron: "0 9 * * *", CalendarPolicy: schedule.Workdays},
		{Name: "t", Kind: "k", Cron: "0 9 * * *", Calendar: "fr", CalendarPolicy: "weekends"},
		{Name: "t", Kind: "k", Cron: "0 9 * * *", Calendar: "a\nb"},
	}
	for _, b := range bad {
		if err := b.Validate(); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Validate(%+v): %v; want ErrInvalid", b, err)
		}
	}
	ok := &store.Trigger{Name: "t", Kind: "k", Cron: "0 9 * * *", TimeZone: "Europe/Paris", Calendar: "fr", CalendarPolicy: schedule.NextWorkday}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := paris().Compile()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ok.Spec().Next(time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC), r); err != nil || !n.Equal(time.Date(2026, 10, 26, 8, 0, 0, 0, time.UTC)) {
		t.Fatalf("Spec().Next on Saturday: %v, %v; want Monday 09:00 Paris", n, err)
	}
}

func TestCalendarValidate(t *testing.T) {
	every := make([]schedule.Date, 0, 366)
	for d := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() == 2024; d = d.AddDate(0, 0, 1) {
		every = append(every, schedule.Date{Date: d.Format(time.DateOnly), Yearly: true})
	}
	mod := func(f func(c *store.Calendar)) *store.Calendar { c := paris(); f(c); return c }
	bad := []struct {
		name string
		c    *store.Calendar
		msg  string
	}{
		{"no name", mod(func(c *store.Calendar) { c.Name = "" }), "name"},
		{"unknown zone", mod(func(c *store.Calendar) { c.TimeZone = "Mars/Olympus_Mons" }), "Mars/Olympus_Mons"},
		{"no working day", mod(func(c *store.Calendar) { c.Workdays = nil }), "never fire"},
		{"every day of the year off, yearly", mod(func(c *store.Calendar) { c.Dates = every }), "never fire"},
		{"weekday out of range", mod(func(c *store.Calendar) { c.Workdays = []time.Weekday{7} }), "weekday 7"},
		{"weekday twice", mod(func(c *store.Calendar) { c.Workdays = []time.Weekday{1, 1} }), "twice"},
		{"malformed date", mod(func(c *store.Calendar) { c.Dates = []schedule.Date{{Date: "25/12/2026"}} }), "YYYY-MM-DD"},
		{"impossible date", mod(func(c *store.Calendar) { c.Dates = []schedule.Date{{Date: "2026-02-30"}} }), "2026-02-30"},
		{"date twice", mod(func(c *store.Calendar) {
			c.Dates = []schedule.Date{{Date: "2026-05-01"}, {Date: "2026-05-01", Name: "again"}}
		}), "twice"},
		{"too many dates", mod(func(c *store.Calendar) {
			c.Dates = nil
			for i := range store.MaxCalendarDates + 1 {
				c.Dates = append(c.Dates, schedule.Date{Date: time.Date(2026, 1, 1+i, 0, 0, 0, 0, time.UTC).Format(time.DateOnly)})
			}
		}), "at most"},
	}
	for _, tc := range bad {
		err := tc.c.Validate()
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) || strings.Contains(err.Error(), "schedule: invalid") {
			t.Errorf("%s: Validate = %v; want ErrInvalid mentioning %q, with the store's prefix alone", tc.name, err, tc.msg)
		}
	}
	// Every day but one of the year off, yearly: it still works.
	if err := mod(func(c *store.Calendar) { c.Dates = every[1:] }).Validate(); err != nil {
		t.Errorf("one working day a year left: %v", err)
	}
	// Many fixed dates in a row are fine: the days after them work.
	if err := mod(func(c *store.Calendar) {
		c.Dates = nil
		for i := range 40 {
			c.Dates = append(c.Dates, schedule.Date{Date: time.Date(2026, 7, 1+i, 0, 0, 0, 0, time.UTC).Format(time.DateOnly), Name: fmt.Sprint("closed ", i)})
		}
	}).Validate(); err != nil {
		t.Errorf("forty days closed: %v", err)
	}
}

package console_test

import (
	"net/url"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestCalendarPagesInBrowser creates a calendar with the form in headless
// Chromium, as a person would, and previews a schedule on it.
func TestCalendarPagesInBrowser(t *testing.T) {
	e := newEnvOn(t, redisStore)
	b := newBrowser(t)
	b.signIn(e, adminToken)
	b.open(e, "/calendars")
	b.do("fill the create form",
		chromedp.SendKeys(chromedp.CSS("#c-name"), "office"),
		chromedp.SendKeys(chromedp.CSS("#c-tz"), "Europe/Paris"),
		chromedp.SendKeys(chromedp.CSS("#c-dates"), "2026-12-24 Christmas Eve\nyearly 2026-12-25 Christmas\nyearly 2027-01-01 New Year"))
	b.shot("calendars-form")
	b.click("create", "#c-create")
	b.until("the new calendar's page", `location.pathname === "/console/calendars/office" && document.querySelector("#dates") !== null`)
	b.open(e, "/calendars/office?"+url.Values{"cron": {"0 9 * * *"}, "tz": {"Europe/Paris"}, "policy": {"next-workday"}}.Encode())
	b.until("the preview", `document.querySelectorAll("#preview tbody tr").length >= 10 && document.querySelector("#preview tr.skipped") !== null`)
	b.shot("calendar-preview")
	b.open(e, "/calendars")
	b.until("the list", `document.querySelector('tr[data-calendar="office"]') !== null`)
	b.shot("calendars-list")
}

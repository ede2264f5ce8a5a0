package console_test

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
)

// postFile posts a multipart form with fields and one file.
func postFile(t *testing.T, c *http.Client, u string, fields map[string]string, field, name string, data []byte) page {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for k, v := range fields {
		if err := mw.WriteField(k, v); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := mw.CreateFormFile(field, name)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(data)
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, u, &b)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return page{res.StatusCode, res.Header, string(body)}
}

// TestCalendarPages creates a calendar with the form, imports a holiday
// file, previews a schedule on it (skipped and moved ticks shown), edits
// it (a stale version refused) and deletes it; a viewer sees the pages
// without their forms.
func TestCalendarPages(t *testing.T) {
	e := newEnv(t)
	c := browserless(t)
	csrf := signIn(t, e, c, adminToken)

	// Create with the form: weekdays, a fixed and a yearly day off.
	p := post(t, c, e.console+"/calendars", url.Values{"csrf": {csrf}, "name": {"shop"}, "tz": {"Europe/Paris"},
		"workdays": {"2", "3", "4", "5", "6"}, "dates": {"2026-12-24 Christmas Eve\nyearly 2026-05-01 Labour Day\n"}}, nil)
	if p.status != http.StatusSeeOther {
		t.Fatalf("create: %d\n%s", p.status, p.body)
	}
	p = get(t, c, e.console+"/calendars/shop")
	for _, want := range []string{"Calendar shop", "Europe/Paris", "Tue, Wed, Thu, Fri, Sat", "Christmas Eve", "Labour Day", "every year", "no trigger"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("calendar page lacks %q", want)
		}
	}
	// A bad line in the days off is shown, and nothing stored.
	p = post(t, c, e.console+"/calendars", url.Values{"csrf": {csrf}, "name": {"bad"}, "workdays": {"1"}, "dates": {"24/12/2026 Eve"}}, nil)
	if p.status != http.StatusBadRequest || !strings.Contains(p.body, "line 1") {
		t.Errorf("a bad date line: %d\n%s", p.status, p.body)
	}
	p = post(t, c, e.console+"/calendars", url.Values{"csrf": {csrf}, "name": {"bad"}}, nil)
	if p.status != http.StatusBadRequest || !strings.Contains(p.body, "never fire") {
		t.Errorf("a calendar without working days: %d\n%s", p.status, p.body)
	}

	// Import a holiday file.
	ics, err := os.ReadFile("../../icalimport/testdata/fr-office-2026.ics")
	if err != nil {
		t.Fatal(err)
	}
	p = postFile(t, c, e.console+"/calendars/import", map[string]string{"csrf": csrf, "name": "fr", "workdays": "1"}, "ical", "fr.ics", ics)
	if p.status != http.StatusSeeOther {
		t.Fatalf("import: %d\n%s", p.status, p.body)
	}
	p = get(t, c, e.console+"/calendars/fr")
	if !strings.Contains(p.body, "Armistice 1918") || !strings.Contains(p.body, "Imported from France - office holidays") {
		t.Errorf("imported calendar page:\n%s", p.body)
	}
	p = postFile(t, c, e.console+"/calendars/import", map[string]string{"csrf": csrf, "name": "broken"}, "ical", "x.ics", []byte("BEGIN:VCALENDAR\r\n"))
	if p.status != http.StatusBadRequest || !strings.Contains(p.body, "iCalendar") {
		t.Errorf("a truncated file: %d\n%s", p.status, p.body)
	}
	p = postFile(t, c, e.console+"/calendars/import", map[string]string{"name": "nocsrf"}, "ical", "fr.ics", ics)
	if p.status != http.StatusForbidden {
		t.Errorf("an import without the CSRF token: %d, want 403", p.status)
	}

	// The list shows both.
	p = get(t, c, e.console+"/calendars")
	for _, want := range []string{`data-calendar="fr"`, `data-calendar="shop"`, "Europe/Paris", `id="new-calendar"`, `id="import-calendar"`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("calendars page lacks %q", want)
		}
	}

	// Preview Saturdays at 09:00 on fr (Monday only) moved to Monday.
	p = get(t, c, e.console+"/calendars/fr?"+url.Values{"cron": {"0 9 * * SAT"}, "tz": {"Europe/Paris"}, "policy": {"next-workday"}}.Encode())
	if !strings.Contains(p.body, `class="skipped"`) || !strings.Contains(p.body, `class="moved"`) {
		t.Errorf("preview shows no skipped and moved ticks:\n%s", p.body)
	}
	// Under workdays a Saturday schedule never fires on it: every tick is
	// shown skipped.
	p = get(t, c, e.console+"/calendars/fr?"+url.Values{"cron": {"0 9 * * SAT"}, "policy": {"workdays"}}.Encode())
	if !strings.Contains(p.body, `class="skipped"`) || strings.Contains(p.body, `class="fires"`) || strings.Contains(p.body, `class="moved"`) {
		t.Errorf("a schedule that never fires on the calendar:\n%s", p.body)
	}
	p = get(t, c, e.console+"/calendars/fr?"+url.Values{"cron": {"61 * * * *"}}.Encode())
	if !strings.Contains(p.body, `id="preview-error"`) {
		t.Errorf("a bad cron spec shows no error:\n%s", p.body)
	}

	// Edit: a stale version is refused, the read one saves.
	version := regexp.MustCompile(`name="version" value="(\d+)"`).FindStringSubmatch(get(t, c, e.console+"/calendars/shop").body)
	if version == nil {
		t.Fatal("no version in the edit form")
	}
	edit := url.Values{"csrf": {csrf}, "tz": {"Europe/Paris"}, "workdays": {"1", "2", "3", "4", "5"}, "dates": {"2027-07-14 Bastille"}, "version": {"999999"}}
	if p = post(t, c, e.console+"/calendars/shop/update", edit, nil); p.status != http.StatusBadRequest {
		t.Errorf("edit at a stale version: %d", p.status)
	}
	edit.Set("version", version[1])
	if p = post(t, c, e.console+"/calendars/shop/update", edit, nil); p.status != http.StatusSeeOther {
		t.Fatalf("edit: %d\n%s", p.status, p.body)
	}
	if p = get(t, c, e.console+"/calendars/shop"); !strings.Contains(p.body, "Bastille") || strings.Contains(p.body, "Christmas Eve") {
		t.Errorf("after the edit:\n%s", p.body)
	}

	// A viewer sees the pages without forms.
	v := browserless(t)
	signIn(t, e, v, viewerToken)
	if p = get(t, v, e.console+"/calendars"); p.status != http.StatusOK || strings.Contains(p.body, `id="new-calendar"`) || !strings.Contains(p.body, "shop") {
		t.Errorf("viewer's calendars page: %d, forms shown: %v", p.status, strings.Contains(p.body, `id="new-calendar"`))
	}
	if p = get(t, v, e.console+"/calendars/shop"); strings.Contains(p.body, `id="edit-calendar"`) {
		t.Error("a viewer sees the edit form")
	}

	// Delete.
	if p = post(t, c, e.console+"/calendars/shop/delete", url.Values{"csrf": {csrf}}, nil); p.status != http.StatusSeeOther {
		t.Fatalf("delete: %d\n%s", p.status, p.body)
	}
	if p = get(t, c, e.console+"/calendars/shop"); p.status != http.StatusNotFound {
		t.Errorf("after delete: %d", p.status)
	}
}

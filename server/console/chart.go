package console

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"
)

// chartSeries is one line of a chart.
type chartSeries struct {
	Name   string
	Values []float64
	// Total, when set, is shown in the legend in place of the latest
	// value ("total 42", "3.1% overall").
	Total string
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH = 480.0, 160.0
	chartLeft      = 56.0
	chartBottom    = 22.0
	chartTop       = 10.0
)

// lineChart draws series over the last hour as an SVG line chart, with
// format naming a value (the y axis's maximum and the legend's latest
// values).
func lineChart(id, title string, series []chartSeries, format func(float64) string) template.HTML {
	return spanChart(id, title, "−60 min", series, format)
}

// spanChart draws series as an SVG line chart whose x axis runs from span
// ago ("−24 h") to now, with format naming a value (the y axis's maximum
// and the legend's latest values). Each line carries its values in
// data-values, comma-separated. Its colours come from the stylesheet (classes s0, s1, ...), as
// the Content-Security-Policy forbids inline styles.
func spanChart(id, title, span string, series []chartSeries, format func(float64) string) template.HTML {
	top := 0.0
	n := 0
	for _, s := range series {
		n = max(n, len(s.Values))
		for _, v := range s.Values {
			top = max(top, v)
		}
	}
	if top == 0 {
		top = 1
	}
	plotW, plotH := chartW-chartLeft-8, chartH-chartTop-chartBottom
	x := func(i int) float64 {
		if n <= 1 {
			return chartLeft
		}
		return chartLeft + plotW*float64(i)/float64(n-1)
	}
	y := func(v float64) float64 { return chartTop + plotH*(1-v/top) }
	var b strings.Builder
	var summary []string
	for _, s := range series {
		if len(s.Values) > 0 {
			summary = append(summary, fmt.Sprintf("%s %s", s.Name, format(s.Values[len(s.Values)-1])))
		}
	}
	fmt.Fprintf(&b, `<figure class="chart" id="%s"><figcaption>%s</figcaption>`, template.HTMLEscapeString(id), template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<svg viewBox="0 0 %.0f %.0f" role="img" aria-label="%s"><title>%s; this minute: %s</title>`,
		chartW, chartH, template.HTMLEscapeString(title), template.HTMLEscapeString(title), template.HTMLEscapeString(strings.Join(summary, ", ")))
	fmt.Fprintf(&b, `<line class="axis" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, chartLeft, chartTop+plotH, chartLeft+plotW, chartTop+plotH)
	fmt.Fprintf(&b, `<line class="axis" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, chartLeft, chartTop, chartLeft, chartTop+plotH)
	fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="end">%s</text>`, chartLeft-4, chartTop+8, template.HTMLEscapeString(format(top)))
	fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="end">0</text>`, chartLeft-4, chartTop+plotH)
	fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f">%s</text>`, chartLeft, chartH-6, template.HTMLEscapeString(span))
	fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="end">now</text>`, chartLeft+plotW, chartH-6)
	for i, s := range series {
		pts := make([]string, len(s.Values))
		vals := make([]string, len(s.Values))
		for j, v := range s.Values {
			pts[j] = fmt.Sprintf("%.1f,%.1f", x(j), y(v))
			vals[j] = strconv.FormatFloat(v, 'g', 6, 64)
		}
		fmt.Fprintf(&b, `<polyline class="line s%d" data-series="%s" data-values="%s" points="%s"/>`, i, template.HTMLEscapeString(s.Name), strings.Join(vals, ","), strings.Join(pts, " "))
	}
	b.WriteString(`</svg><ul class="legend">`)
	for i, s := range series {
		last, peak := 0.0, 0.0
		if len(s.Values) > 0 {
			last = s.Values[len(s.Values)-1]
		}
		for _, v := range s.Values {
			peak = max(peak, v)
		}
		lead := "now " + format(last)
		if s.Total != "" {
			lead = s.Total
		}
		fmt.Fprintf(&b, `<li><span class="swatch s%d"></span>%s <span class="muted">(%s, peak %s)</span></li>`,
			i, template.HTMLEscapeString(s.Name), template.HTMLEscapeString(lead), template.HTMLEscapeString(format(peak)))
	}
	b.WriteString(`</ul></figure>`)
	return template.HTML(b.String()) //nolint:gosec // every string in it is escaped above
}

// countFormat formats a count per minute.
func countFormat(v float64) string { return fmt.Sprintf("%.0f/min", v) }

// secondsFormat formats a duration given in seconds.
func secondsFormat(v float64) string {
	d := time.Duration(v * float64(time.Second))
	if d < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// overviewCharts draws the charts of figs; cluster says the attempts and
// run times are every node's (Stats.Follow), else this process's.
func overviewCharts(figs []minuteFigures, cluster bool) []template.HTML {
	var done, failed, wait50, wait99, run50, run99, lag []float64
	for _, f := range figs {
		done = append(done, float64(f.Completed))
		failed = append(failed, float64(f.Failed))
		wait50 = append(wait50, f.WaitP50.Seconds())
		wait99 = append(wait99, f.WaitP99.Seconds())
		run50 = append(run50, f.RunP50.Seconds())
		run99 = append(run99, f.RunP99.Seconds())
		lag = append(lag, f.Lag.Seconds())
	}
	whose := "this process's attempts"
	if cluster {
		whose = "all nodes"
	}
	charts := []template.HTML{
		lineChart("chart-throughput", "Throughput: attempts per minute ("+whose+")", []chartSeries{{Name: "completed", Values: done}, {Name: "failed", Values: failed}}, countFormat),
		lineChart("chart-wait", "Wait: ready to started ("+whose+")", []chartSeries{{Name: "p50", Values: wait50}, {Name: "p99", Values: wait99}}, secondsFormat),
		lineChart("chart-run", "Run time ("+whose+")", []chartSeries{{Name: "p50", Values: run50}, {Name: "p99", Values: run99}}, secondsFormat),
	}
	if cluster {
		// Sampled from the store by Follow: every node's queues.
		charts = append(charts, lineChart("chart-lag", "Lag: wait of the oldest ready instance (all queues, sampled every 10 s)",
			[]chartSeries{{Name: "largest", Values: lag}}, secondsFormat))
	}
	return charts
}

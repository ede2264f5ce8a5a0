package benchkit

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
)

// Sample is one run's figures by name ("jobs/s", "p50 ms", ...).
type Sample map[string]float64

// Result is the median of several runs of one workload on one system.
type Result struct {
	Sample
	Runs int
	Cut  bool   // some run hit its time limit
	Note string // why, or what else the reader must know
	Err  error  // the workload could not run at all
}

// Repeat runs f runs times and returns the median of each figure. A run
// cut short keeps its figures, marks the result and ends the repeat (the
// next runs would hit the same limit: the figure is then of fewer runs,
// and Runs says how many); a run that fails ends it too.
func Repeat(runs int, f func() (Sample, error)) Result {
	var ss []Sample
	var r Result
	for range max(runs, 1) {
		s, err := f()
		if s != nil {
			ss = append(ss, s)
		}
		if err != nil {
			if !isCut(err) {
				r.Err = err
				return r
			}
			r.Cut = true
			r.Note = err.Error()
			if len(ss) < runs {
				r.Note += " (not repeated)"
			}
			break
		}
	}
	r.Runs = len(ss)
	r.Sample = Sample{}
	for _, s := range ss {
		for k := range s {
			if _, done := r.Sample[k]; done {
				continue
			}
			var vs []float64
			for _, o := range ss {
				if v, ok := o[k]; ok {
					vs = append(vs, v)
				}
			}
			r.Sample[k] = Median(vs)
		}
	}
	return r
}

func isCut(err error) bool {
	for e := err; e != nil; {
		if e == ErrCutShort {
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

// Median returns the median of vs (NaN for none).
func Median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Percentile returns the p-quantile (0..1) of sorted by nearest rank.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// millis converts durations in nanoseconds to sorted milliseconds.
func millis(ns []int64) []float64 {
	out := make([]float64, len(ns))
	for i, v := range ns {
		out[i] = float64(v) / 1e6
	}
	slices.Sort(out)
	return out
}

// LoadAvg returns the 1-, 5- and 15-minute load averages as
// /proc/loadavg prints them ("?" where there is none).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// Load1 returns the 1-minute load average (NaN where there is none).
func Load1() float64 {
	var v float64
	if _, err := fmt.Sscan(LoadAvg(), &v); err != nil {
		return math.NaN()
	}
	return v
}

// Machine describes the host: CPUs, memory, load, Go.
func Machine() string {
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				var kb float64
				fmt.Sscan(f[1], &kb)
				mem = fmt.Sprintf("%.1f GiB", kb/(1<<20))
			}
		}
	}
	return fmt.Sprintf("%d CPUs (nproc), %s RAM, load average %s, %s %s/%s, GOMAXPROCS %d",
		runtime.NumCPU(), mem, LoadAvg(), runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
}

// Loaded reports whether the machine was busy (1-minute load above half
// its CPUs), which makes figures noisy.
func Loaded() bool { return Load1() > float64(runtime.NumCPU())/2 }

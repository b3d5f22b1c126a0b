// Package benchpair measures the cost of a guard on a shared, noisy
// machine: it runs the unguarded and the guarded operation alternately in
// one benchmark, so that both see the same load, and reports the median
// of each and their ratio.
package benchpair

import (
	"slices"
	"testing"
	"time"
)

// Run runs plain and guarded alternately, b.N times each, and reports
// "plain-ns/op", "guarded-ns/op" (medians) and "ratio" (guarded over
// plain). It fails b if either returns an error.
func Run(b *testing.B, plain, guarded func() error) {
	var p, g []time.Duration
	for b.Loop() {
		for i, f := range []func() error{plain, guarded} {
			start := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			d := time.Since(start)
			if i == 0 {
				p = append(p, d)
			} else {
				g = append(g, d)
			}
		}
	}
	mp, mg := median(p), median(g)
	b.ReportMetric(float64(mp.Nanoseconds()), "plain-ns/op")
	b.ReportMetric(float64(mg.Nanoseconds()), "guarded-ns/op")
	if mp > 0 {
		b.ReportMetric(float64(mg)/float64(mp), "ratio")
	}
}

// Compare runs three benchmarks under b: "unfenced" and "fenced", each
// operation alone, and "paired", both alternately with Run, for a ratio
// that the machine's load affects on both sides alike.
func Compare(b *testing.B, unfenced, fenced func() error) {
	for _, bc := range []struct {
		name string
		op   func() error
	}{{"unfenced", unfenced}, {"fenced", fenced}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if err := bc.op(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("paired", func(b *testing.B) { Run(b, unfenced, fenced) })
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}

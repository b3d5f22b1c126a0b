package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
)

// writeChart draws the throughput results as an SVG bar chart: one bar
// per workload and topology, its length the median ratio tenure/etcd,
// with each round's ratio as a dot and lines at 1x (parity) and 2x (the
// goal of issue 10).
func writeChart(w io.Writer, r *results) error {
	var topos []topology
	for _, c := range r.Throughput {
		if !slices.Contains(topos, c.Topology) {
			topos = append(topos, c.Topology)
		}
	}
	const (
		left, right, top = 400.0, 40.0, 60.0
		plotW            = 520.0
		barH, gap        = 16.0, 10.0
	)
	colors := []string{"#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee"}
	maxR := 2.5
	for _, c := range r.Throughput {
		for _, x := range c.Rounds {
			maxR = math.Max(maxR, x.Ratio)
		}
	}
	maxR = math.Ceil(maxR*2) / 2
	x := func(v float64) float64 { return left + v/maxR*plotW }
	rows := len(r.Throughput)
	groups := 0
	var last string
	for _, c := range r.Throughput {
		if c.Workload != last {
			groups++
			last = c.Workload
		}
	}
	height := top + float64(rows)*barH + float64(groups)*gap + 70
	width := left + plotW + right
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%.0f" y="22" font-size="15" font-weight="bold">tenure vs etcd 3.6.16: throughput ratio tenure/etcd (median of %d round(s))</text>`+"\n", 10.0, r.Config.Rounds)
	p(`<text x="%.0f" y="40" fill="#555">%s, %d cores; above 1: tenure faster; dots: single rounds</text>`+"\n", 10.0, html.EscapeString(r.Date), r.Machine.Cores)
	bottom := height - 50
	for v := 0.0; v <= maxR+1e-9; v += 0.5 {
		stroke, dash := "#ddd", ""
		switch v {
		case 1:
			stroke = "#333"
		case 2:
			stroke, dash = "#333", ` stroke-dasharray="4 3"`
		}
		p(`<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="%s"%s/>`+"\n", x(v), top-6, x(v), bottom, stroke, dash)
		p(`<text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">%gx</text>`+"\n", x(v), bottom+16, v)
	}
	y := top
	last = ""
	for _, c := range r.Throughput {
		if c.Workload != last {
			if last != "" {
				y += gap
			}
			last = c.Workload
		}
		col := colors[slices.Index(topos, c.Topology)%len(colors)]
		label := fmt.Sprintf("%s, %s", c.Workload, c.Topology)
		p(`<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, y+barH-4, html.EscapeString(label))
		p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", left, y+2, x(c.MedianRatio)-left, barH-4, col)
		for _, rd := range c.Rounds {
			p(`<circle cx="%.1f" cy="%.1f" r="2.5" fill="#222"/>`+"\n", x(rd.Ratio), y+barH/2)
		}
		p(`<text x="%.1f" y="%.1f" fill="#222">%.2f</text>`+"\n", x(c.MedianRatio)+6, y+barH-4, c.MedianRatio)
		y += barH
	}
	p(`<text x="%.0f" y="%.0f" fill="#555">lock = acquire + fenced put + release; contended = handoffs on one name; grant = grant + release; renew = one renewal; write = fenced write</text>`+"\n", 10.0, height-14)
	p("</svg>\n")
	return nil
}

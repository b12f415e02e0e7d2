package report

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	panelW, panelH = 470, 230
	padL, padR     = 64, 16
	padT, padB     = 34, 38
	headerH        = 64
)

// palette gives each contender its colour; sluice's lines are solid, the
// peers' dashed.
var palette = map[string]string{
	sluiceStore:        "#1f77b4",
	sluiceLimiter:      "#2ca02c",
	redisRateName:      "#d62728",
	plainScriptName:    "#ff7f0e",
	floorName:          "#7f7f7f",
	floorPerWindowName: "#bcbd22",
	// Allotments (docs/adr/019): a twin without them in a lighter shade.
	sluiceLimiter + NoAllotmentsSuffix: "#98df8a",
	sluiceRLS:                          "#9467bd",
	sluiceRLS + NoAllotmentsSuffix:     "#c5b0d5",
	sluiceRLS + ", GCRA":               "#8c564b",
	fixedWindowName:                    "#e377c2",
}

// Chart writes an SVG with two panels per shape: decisions/s (linear) and
// p99 (logarithmic) against concurrency, one line per contender.
func (r *Run) Chart(w io.Writer) error {
	shapes := r.shapes()
	var legend strings.Builder
	top := headerH + (r.legend(&legend)-1)*legendRow
	width, height := 2*panelW, top+len(shapes)*panelH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">sluice and its peers on Redis %s, %s (closed loop, %s per point)</text>`+"\n",
		padL, esc(r.Machine.Redis), esc(r.Date.UTC().Format("2006-01-02")), esc(r.perPoint()))
	b.WriteString(legend.String())
	for i, s := range shapes {
		y := top + i*panelH
		r.panel(&b, s, 0, y, false)
		r.panel(&b, s, panelW, y, true)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// legendRow is the height of a row of the legend.
const legendRow = 18

// legend lists every contender once, in as many rows as the chart's width
// takes, and returns the number of rows.
func (r *Run) legend(b *strings.Builder) int {
	var seen []contender
	for _, s := range r.shapes() {
		for _, c := range s.contenders {
			if !containsName(seen, c.name) {
				seen = append(seen, c)
			}
		}
	}
	x, y, rows := padL, 44, 1
	for _, c := range seen {
		w := 48 + 7*len([]rune(c.name))
		if x > padL && x+w > 2*panelW-padR {
			x, y, rows = padL, y+legendRow, rows+1
		}
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"%s/>`, x, y, x+28, y, colour(c.name), dash(c))
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", x+34, y+4, esc(c.name))
		x += w
	}
	return rows
}

// panel draws one chart of shape s at (x0, y0): p99 when latency is set,
// decisions/s otherwise.
func (r *Run) panel(b *strings.Builder, s shapeInfo, x0, y0 int, latency bool) {
	cs := r.Concurrency
	type point struct{ x, v float64 }
	lines := map[string][]point{}
	lo, hi := math.Inf(1), 0.0
	for _, ct := range s.contenders {
		for i, c := range cs {
			m := r.find(s.name, ct.name, c)
			if m == nil {
				continue
			}
			v := m.PerSecond
			if latency {
				v = m.P99
			}
			if v <= 0 {
				continue
			}
			lines[ct.name] = append(lines[ct.name], point{float64(i), v})
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	pw, ph := float64(panelW-padL-padR), float64(panelH-padT-padB)
	left, top := float64(x0+padL), float64(y0+padT)
	title := s.title + " — decisions/s"
	if latency {
		title = s.title + " — p99"
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%d" font-weight="bold">%s</text>`+"\n", left, y0+20, esc(clip(title, 66)))
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", left, top, pw, ph)
	if hi == 0 {
		return
	}
	// y maps a value to the panel: linear from 0 for decisions/s,
	// logarithmic over whole decades for latencies.
	var ticks []float64
	var y func(v float64) float64
	if latency {
		a, z := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if z == a {
			z++
		}
		y = func(v float64) float64 { return top + ph - ph*(math.Log10(v)-a)/(z-a) }
		steps := []float64{1, 2, 5}
		if z-a > 2 {
			steps = steps[:1]
		}
		for e := a; e <= z; e++ {
			for _, m := range steps {
				if v := m * math.Pow(10, e); v <= math.Pow(10, z) {
					ticks = append(ticks, v)
				}
			}
		}
	} else {
		step := niceStep(hi / 4)
		top1 := step * math.Ceil(hi/step)
		y = func(v float64) float64 { return top + ph - ph*v/top1 }
		for v := 0.0; v <= top1+step/2; v += step {
			ticks = append(ticks, v)
		}
	}
	for _, v := range ticks {
		yy := y(v)
		label := rate(v)
		if latency {
			label = micros(v)
		}
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#e5e5e5"/>`, left, yy, left+pw, yy)
		fmt.Fprintf(b, `<text x="%.0f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", left-6, yy+4, esc(label))
	}
	x := func(i float64) float64 {
		if len(cs) == 1 {
			return left + pw/2
		}
		return left + 14 + (pw-28)*i/float64(len(cs)-1)
	}
	for i, c := range cs {
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">%d</text>`, x(float64(i)), top+ph+16, c)
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle" fill="#555">concurrency</text>`+"\n", left+pw/2, top+ph+31)
	for _, ct := range s.contenders {
		pts := lines[ct.name]
		if len(pts) == 0 {
			continue
		}
		var path strings.Builder
		for i, p := range pts {
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f,%.1f ", cmd, x(p.x), y(p.v))
		}
		fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="2.5"%s/>`, strings.TrimSpace(path.String()), colour(ct.name), dash(ct))
		for _, p := range pts {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, x(p.x), y(p.v), colour(ct.name))
		}
		b.WriteString("\n")
	}
}

// niceStep rounds a tick step up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func colour(name string) string {
	if c, ok := palette[name]; ok {
		return c
	}
	return "#7f7f7f"
}

func dash(c contender) string {
	if c.sluice {
		return ""
	}
	return ` stroke-dasharray="7 4"`
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func esc(s string) string { return html.EscapeString(s) }

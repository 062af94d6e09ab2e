package report

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strconv"
)

// Chart is a small line chart rendered as standalone SVG: axes (linear or
// log10), grid, one polyline per series, optional point markers and
// min–max whiskers, and a legend.
type Chart struct {
	Title, Subtitle string
	XLabel, YLabel  string
	XLog, YLog      bool
	// XTicks, if set, replaces the automatic ticks of the X axis.
	XTicks []float64
	// XTight makes a log X axis span the data (padded) instead of whole decades.
	XTight bool
	// YFrom0 makes a linear Y axis start at zero.
	YFrom0 bool
	Series []Series
	// Width and Height in pixels; 0 means 760×440.
	Width, Height int
}

// Series is one line.
type Series struct {
	Name   string
	Color  string
	Points []Point
	// Markers draws a dot on each point.
	Markers bool
	// Dashed draws the line dashed.
	Dashed bool
}

// Point is one (x, y), with an optional whisker from YLow to YHigh.
type Point struct {
	X, Y        float64
	YLow, YHigh float64 // both 0: no whisker
}

const (
	marginLeft   = 78
	marginRight  = 22
	marginTop    = 58
	marginBottom = 56
)

// SVG renders the chart.
func (c Chart) SVG() []byte {
	pl := c.layout()
	w, h := pl.w, pl.h
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", marginLeft, esc(c.Title))
	if c.Subtitle != "" {
		fmt.Fprintf(&b, `<text x="%d" y="40" fill="#555">%s</text>`+"\n", marginLeft, esc(c.Subtitle))
	}

	c.writeAxes(&b, pl)
	c.writeSeries(&b, pl)
	c.writeLegend(&b, pl)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// plot is a chart's layout: its size, the plot area's, and its axes with
// their ticks.
type plot struct {
	w, h           int
	pw, ph         float64
	xa, ya         *axis
	xticks, yticks []float64
}

// px is the horizontal pixel position of x.
func (p plot) px(x float64) float64 { return marginLeft + p.xa.frac(x)*p.pw }

// py is the vertical pixel position of y.
func (p plot) py(y float64) float64 { return marginTop + (1-p.ya.frac(y))*p.ph }

// layout sizes the chart and fits its axes to the series' points.
func (c Chart) layout() plot {
	w, h := c.Width, c.Height
	if w == 0 {
		w = 760
	}
	if h == 0 {
		h = 440
	}
	pw := float64(w - marginLeft - marginRight)
	ph := float64(h - marginTop - marginBottom)

	xa := newAxis(c.XLog, false)
	xa.tight = c.XTight
	ya := newAxis(c.YLog, c.YFrom0 && !c.YLog)
	for _, s := range c.Series {
		for _, p := range s.Points {
			xa.add(p.X)
			ya.add(p.Y)
			if p.YLow != 0 || p.YHigh != 0 {
				ya.add(p.YLow)
				ya.add(p.YHigh)
			}
		}
	}
	xa.finish()
	ya.finish()
	xticks := xa.ticks()
	if len(c.XTicks) > 0 {
		xticks = c.XTicks
	}
	yticks := ya.ticks()
	return plot{w: w, h: h, pw: pw, ph: ph, xa: xa, ya: ya, xticks: xticks, yticks: yticks}
}

// writeAxes draws the grid, the plot area's frame, the tick labels and
// the axis labels.
func (c Chart) writeAxes(b *bytes.Buffer, pl plot) {
	h, pw, ph, xa, ya, xticks, yticks := pl.h, pl.pw, pl.ph, pl.xa, pl.ya, pl.xticks, pl.yticks
	px, py := pl.px, pl.py
	b.WriteString(`<g stroke="#e3e3e3" stroke-width="1">` + "\n")
	for _, t := range xticks {
		if !xa.contains(t) {
			continue
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f"/>`+"\n", px(t), marginTop, px(t), marginTop+ph)
	}
	for _, t := range yticks {
		if !ya.contains(t) {
			continue
		}
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", marginLeft, py(t), marginLeft+pw, py(t))
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", marginLeft, marginTop, pw, ph)
	for _, t := range xticks {
		if !xa.contains(t) {
			continue
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333">%s</text>`+"\n", px(t), marginTop+ph+16, tickLabel(t))
	}
	for _, t := range yticks {
		if !ya.contains(t) {
			continue
		}
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#333">%s</text>`+"\n", marginLeft-6, py(t)+4, tickLabel(t))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", marginLeft+pw/2, h-14, esc(c.XLabel))
	fmt.Fprintf(b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", marginTop+ph/2, esc(c.YLabel))
}

// writeSeries draws each series' line, whiskers and markers.
func (c Chart) writeSeries(b *bytes.Buffer, pl plot) {
	px, py := pl.px, pl.py
	for _, s := range c.Series {
		if len(s.Points) == 0 {
			continue
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		b.WriteString(`<polyline fill="none" stroke-width="2" stroke-linejoin="round" stroke="` + esc(s.Color) + `"` + dash + ` points="`)
		for i, p := range s.Points {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(b, "%.1f,%.1f", px(p.X), py(p.Y))
		}
		b.WriteString(`"/>` + "\n")
		for _, p := range s.Points {
			if p.YLow != 0 || p.YHigh != 0 {
				fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`+"\n",
					px(p.X), py(p.YLow), px(p.X), py(p.YHigh), esc(s.Color))
			}
			if s.Markers {
				fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", px(p.X), py(p.Y), esc(s.Color))
			}
		}
	}
}

// writeLegend draws the legend of the series that have points, inside
// the plot, in the corner where it hides the least of the lines.
func (c Chart) writeLegend(b *bytes.Buffer, pl plot) {
	pw, ph, px, py := pl.pw, pl.ph, pl.px, pl.py
	var visible []Series
	for _, s := range c.Series {
		if len(s.Points) > 0 {
			visible = append(visible, s)
		}
	}
	if len(visible) > 0 {
		lw := 0
		for _, s := range visible {
			lw = max(lw, len([]rune(s.Name)))
		}
		boxW, boxH := 44+7*lw, 8+18*len(visible)
		lx, ly := c.legendCorner(float64(boxW), float64(boxH), pw, ph, px, py)
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%d" height="%d" fill="white" fill-opacity="0.85" stroke="#bbb"/>`+"\n",
			lx, ly, boxW, boxH)
		for i, s := range visible {
			y := ly + 16 + 18*float64(i)
			dash := ""
			if s.Dashed {
				dash = ` stroke-dasharray="6 4"`
			}
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", lx+8, y-4, lx+32, y-4, esc(s.Color), dash)
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+38, y, esc(s.Name))
		}
	}
}

// legendCorner picks the corner of the plot area where the legend box covers
// the fewest samples of the drawn lines (top-left on a tie).
func (c Chart) legendCorner(w, h, pw, ph float64, px, py func(float64) float64) (float64, float64) {
	const pad = 10
	left, right := float64(marginLeft)+pad, float64(marginLeft)+pw-pad-w
	top, bottom := float64(marginTop)+pad, float64(marginTop)+ph-pad-h
	corners := [][2]float64{{left, top}, {right, top}, {right, bottom}, {left, bottom}}
	best, bestHits := corners[0], -1
	for _, k := range corners {
		hits := 0
		for _, s := range c.Series {
			for i := 1; i < len(s.Points); i++ {
				x0, y0 := px(s.Points[i-1].X), py(s.Points[i-1].Y)
				x1, y1 := px(s.Points[i].X), py(s.Points[i].Y)
				for j := 0; j <= 20; j++ {
					f := float64(j) / 20
					x, y := x0+f*(x1-x0), y0+f*(y1-y0)
					if x >= k[0] && x <= k[0]+w && y >= k[1] && y <= k[1]+h {
						hits++
					}
				}
			}
			if len(s.Points) == 1 {
				x, y := px(s.Points[0].X), py(s.Points[0].Y)
				if x >= k[0] && x <= k[0]+w && y >= k[1] && y <= k[1]+h {
					hits++
				}
			}
		}
		if bestHits < 0 || hits < bestHits {
			best, bestHits = k, hits
		}
	}
	return best[0], best[1]
}

func esc(s string) string { return html.EscapeString(s) }

// axis maps data values to [0, 1].
type axis struct {
	log      bool
	from0    bool
	tight    bool
	min, max float64
	seen     bool
}

func newAxis(log, from0 bool) *axis { return &axis{log: log, from0: from0} }

func (a *axis) add(v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) || (a.log && v <= 0) {
		return
	}
	if !a.seen {
		a.min, a.max, a.seen = v, v, true
		return
	}
	a.min = min(a.min, v)
	a.max = max(a.max, v)
}

// finish rounds the range outwards to whole decades (log) or nice steps.
func (a *axis) finish() {
	if !a.seen {
		a.min, a.max = 0, 1
		if a.log {
			a.min, a.max = 1, 10
		}
	}
	if a.log && a.tight {
		a.min, a.max = a.min/1.25, a.max*1.25
		return
	}
	if a.log {
		a.min = math.Pow(10, math.Floor(math.Log10(a.min)))
		a.max = math.Pow(10, math.Ceil(math.Log10(a.max)))
		if a.max <= a.min {
			a.max = a.min * 10
		}
		return
	}
	if a.from0 {
		a.min = min(a.min, 0)
	}
	if a.max == a.min {
		a.max = a.min + 1
	}
	step := niceStep((a.max - a.min) / 5)
	a.min = math.Floor(a.min/step) * step
	a.max = math.Ceil(a.max/step) * step
}

func (a *axis) frac(v float64) float64 {
	if a.log {
		if v <= 0 {
			return 0
		}
		return (math.Log10(v) - math.Log10(a.min)) / (math.Log10(a.max) - math.Log10(a.min))
	}
	return (v - a.min) / (a.max - a.min)
}

func (a *axis) contains(v float64) bool {
	const eps = 1e-9
	return v >= a.min*(1-eps)-eps && v <= a.max*(1+eps)+eps
}

// ticks returns decades (with 2 and 5 between them when there are few
// decades) for a log axis, nice steps for a linear one.
func (a *axis) ticks() []float64 {
	var ts []float64
	if a.log {
		decades := math.Log10(a.max) - math.Log10(a.min)
		for d := a.min; d <= a.max*1.0001; d *= 10 {
			ts = append(ts, d)
			if decades <= 3 {
				ts = append(ts, 2*d, 5*d)
			}
		}
		return ts
	}
	step := niceStep((a.max - a.min) / 5)
	for v := a.min; v <= a.max+step/1e6; v += step {
		ts = append(ts, math.Round(v/step)*step)
	}
	return ts
}

// niceStep rounds raw up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// tickLabel prints a tick compactly: 0.001, 0.5, 20, 1.5k, 30k, 2M.
func tickLabel(v float64) string {
	switch av := math.Abs(v); {
	case av >= 1e6:
		return trimFloat(v/1e6) + "M"
	case av >= 1e3:
		return trimFloat(v/1e3) + "k"
	default:
		return trimFloat(v)
	}
}

func trimFloat(v float64) string {
	return strconv.FormatFloat(v, 'g', 6, 64) // 6 digits hide float noise (0.30000000000000004)
}

"""SVG primitives for charts: linear scales with readable ticks, axes, polylines, marks, bars.

Every chart is one `<svg class="chart KIND">` whose drawn items carry class names (`mark drop`, `bar`,
`series`) so a reader (or a test in a browser) can find and count them; `<title>` children give tooltips.
"""

import math
from html import escape
from typing import Iterable, List, Sequence, Tuple

import numpy as np

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def esc(v) -> str:
    return escape(str(v), quote=True)


def nice_ticks(lo: float, hi: float, n: int = 5) -> List[float]:
    """About n round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 12) for i in range(int((hi - first) / step + 1e-9) + 1)]


def si(v: float, unit: str = "") -> str:
    """A number with an SI prefix: 1.5k, 20M, 3µ."""
    a = abs(v)
    if a == 0:
        return f"0{unit}"
    for f, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n")):
        if a >= f * 0.9999:
            return f"{v / f:.4g}{p}{unit}"
    return f"{v:.3g}{unit}"


class Plot:
    """A chart area: data ranges mapped onto a width x height box inside margins."""

    def __init__(
        self,
        kind: str,
        x_range: Tuple[float, float],
        y_range: Tuple[float, float],
        width: int = 760,
        height: int = 260,
        left: int = 70,
        right: int = 20,
        top: int = 24,
        bottom: int = 42,
        attrs=None,
    ):
        self.kind, self.w, self.h = kind, width, height
        self.l, self.r, self.t, self.b = left, right, top, bottom
        x0, x1 = x_range
        y0, y1 = y_range
        self.x0, self.x1 = x0, (x1 if x1 > x0 else x0 + 1)
        self.y0, self.y1 = y0, (y1 if y1 > y0 else y0 + 1)
        self.attrs = attrs or {}
        self.items: List[str] = []

    def x(self, v: float) -> float:
        return round(self.l + (v - self.x0) / (self.x1 - self.x0) * (self.w - self.l - self.r), 2)

    def y(self, v: float) -> float:
        return round(self.h - self.b - (v - self.y0) / (self.y1 - self.y0) * (self.h - self.t - self.b), 2)

    def axes(self, title: str, xlabel: str, ylabel: str, xfmt=si, yfmt=si) -> None:
        pl, pr, pt, pb = self.l, self.w - self.r, self.t, self.h - self.b
        out = [
            f"<text class='title' x='{pl}' y='{min(pt - 8, 16)}'>{esc(title)}</text>",
            f"<rect class='plot-area' x='{pl}' y='{pt}' width='{pr - pl}' height='{pb - pt}'/>",
        ]
        for v in nice_ticks(self.x0, self.x1, 6):
            X = self.x(v)
            out.append(
                f"<line class='grid' x1='{X}' y1='{pt}' x2='{X}' y2='{pb}'/>"
                f"<text class='tick' x='{X}' y='{pb + 14}' text-anchor='middle'>{esc(xfmt(v))}</text>"
            )
        for v in nice_ticks(self.y0, self.y1, 5):
            Y = self.y(v)
            out.append(
                f"<line class='grid' x1='{pl}' y1='{Y}' x2='{pr}' y2='{Y}'/>"
                f"<text class='tick' x='{pl - 6}' y='{Y + 4}' text-anchor='end'>{esc(yfmt(v))}</text>"
            )
        out.append(
            f"<text class='label' x='{(pl + pr) / 2}' y='{self.h - 6}' text-anchor='middle'>{esc(xlabel)}</text>"
            f"<text class='label' transform='translate(14,{(pt + pb) / 2}) rotate(-90)' "
            f"text-anchor='middle'>{esc(ylabel)}</text>"
        )
        self.items[:0] = out

    def xa(self, v) -> np.ndarray:
        return np.round(
            self.l + (np.asarray(v, np.float64) - self.x0) / (self.x1 - self.x0) * (self.w - self.l - self.r), 2
        )

    def ya(self, v) -> np.ndarray:
        return np.round(
            self.h - self.b - (np.asarray(v, np.float64) - self.y0) / (self.y1 - self.y0) * (self.h - self.t - self.b),
            2,
        )

    def polyline(
        self, xs: Sequence[float], ys: Sequence[float], colour: str, name: str, step: bool = False, width: float = 1.5
    ) -> None:
        """A line through the points (a staircase with `step`), thinned to what a pixel column can show."""
        X, Y = self.xa(xs), self.ya(ys)
        if step and len(X) > 1:
            X, Y = np.repeat(X, 2)[1:], np.repeat(Y, 2)[:-1]
        X, Y = _thin(X, Y)
        pts = " ".join(f"{a:g},{b:g}" for a, b in zip(X.tolist(), Y.tolist()))
        self.items.append(
            f"<polyline class='series' data-name='{esc(name)}' fill='none' stroke='{colour}' "
            f"stroke-width='{width}' points='{pts}'><title>{esc(name)}</title></polyline>"
        )

    def marks(self, cls: str, points: Iterable[Tuple[float, float, str]], shape: str, colour: str) -> None:
        """One element per point, class `mark CLS`, drawn as a small shape centred on it."""
        g = [f"<g class='marks {cls}' fill='{colour}' stroke='{colour}'>"]
        points = list(points)
        xs = self.xa([p[0] for p in points]).tolist()
        ys = self.ya([p[1] for p in points]).tolist()
        for X, Y, (_, _, tip) in zip(xs, ys, points):
            if shape == "x":
                d = f"M{X - 3},{Y - 3}L{X + 3},{Y + 3}M{X - 3},{Y + 3}L{X + 3},{Y - 3}"
                g.append(f"<path class='mark {cls}' d='{d}' stroke-width='1.6'><title>{esc(tip)}</title></path>")
            elif shape == "tri":
                g.append(
                    f"<path class='mark {cls}' d='M{X},{Y - 5}L{X + 4},{Y + 3}L{X - 4},{Y + 3}Z'>"
                    f"<title>{esc(tip)}</title></path>"
                )
            elif shape == "tick":
                g.append(
                    f"<path class='mark {cls}' d='M{X},{Y - 3}L{X},{Y + 3}' stroke-width='1.2'>"
                    f"<title>{esc(tip)}</title></path>"
                )
            elif shape == "ring":
                g.append(
                    f"<circle class='mark {cls}' cx='{X}' cy='{Y}' r='3' fill='none' stroke-width='1.2'>"
                    f"<title>{esc(tip)}</title></circle>"
                )
            else:
                g.append(f"<circle class='mark {cls}' cx='{X}' cy='{Y}' r='2'><title>{esc(tip)}</title></circle>")
        g.append("</g>")
        self.items.append("".join(g))

    def bands(self, cls: str, spans: Iterable[Tuple[float, float, str]], colour: str) -> None:
        """Vertical shaded spans over the whole plot height (e.g. RNR waits)."""
        top, bottom = self.t, self.h - self.b
        g = [f"<g class='bands {cls}'>"]
        for a, b, tip in spans:
            X0, X1 = self.x(a), self.x(b)
            g.append(
                f"<rect class='band {cls}' x='{X0}' y='{top}' width='{max(X1 - X0, 1.5)}' "
                f"height='{bottom - top}' fill='{colour}' fill-opacity='0.25'><title>{esc(tip)}</title></rect>"
            )
        g.append("</g>")
        self.items.append("".join(g))

    def bars(self, edges: Sequence[float], counts: Sequence[float], colour: str, tips: Sequence[str]) -> None:
        base = self.y(self.y0)
        g = [f"<g class='bars' fill='{colour}'>"]
        for a, b, c, tip in zip(edges[:-1], edges[1:], counts, tips):
            if c <= 0:
                continue
            X0, X1, Y = self.x(a), self.x(b), self.y(c)
            g.append(
                f"<rect class='bar' data-count='{c:g}' x='{X0}' y='{Y}' width='{max(X1 - X0 - 1, 1)}' "
                f"height='{max(base - Y, 0.5)}'><title>{esc(tip)}</title></rect>"
            )
        g.append("</g>")
        self.items.append("".join(g))

    def legend(self, entries: Sequence[Tuple[str, str]]) -> None:
        """A row of colour keys in the top margin, under the title (give the Plot top=40 or more)."""
        x = self.l
        out = ["<g class='legend'>"]
        for name, colour in entries:
            out.append(
                f"<rect x='{x}' y='{self.t - 16}' width='10' height='10' fill='{colour}'/>"
                f"<text x='{x + 14}' y='{self.t - 7}'>{esc(name)}</text>"
            )
            x += 22 + 7 * len(name)
        out.append("</g>")
        self.items.append("".join(out))

    def svg(self) -> str:
        attrs = "".join(f" data-{k}='{esc(v)}'" for k, v in self.attrs.items())
        return (
            f"<svg class='chart {self.kind}' width='{self.w}' "
            f"height='{self.h}' viewBox='0 0 {self.w} {self.h}'{attrs}>" + "".join(self.items) + "</svg>"
        )


def _thin(X: np.ndarray, Y: np.ndarray, limit: int = 2000):
    """Points of a line left in drawing order, at most four per run of points in one pixel column: the
    first, the lowest, the highest, the last (what the eye sees of that column)."""
    if len(X) <= limit:
        return X, Y
    col = np.floor(X).astype(np.int64)
    starts = np.r_[0, np.nonzero(np.diff(col))[0] + 1]
    ends = np.r_[starts[1:], len(X)] - 1
    lo, hi = np.minimum.reduceat(Y, starts), np.maximum.reduceat(Y, starts)
    xs = np.stack([X[starts], X[starts], X[starts], X[ends]], 1).ravel()
    ys = np.stack([Y[starts], lo, hi, Y[ends]], 1).ravel()
    return xs, ys

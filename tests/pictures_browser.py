"""Read a rendered report page in headless Chromium (Debian's `chromium`, installed by ./dev test).

A copy of the page gets a probe script that runs after layout: for every `svg.chart` it records its data
attributes and size, and for each kind of mark how many there are and how many the browser laid out inside
the chart's plot area; bars, lines and ladder messages likewise.  The probe's JSON is read back from the DOM
Chromium dumps (--dump-dom), so the numbers are those of the page as a browser renders it.
"""

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

PROBE = r"""<script>
(() => {
  const out = {charts: [], title: document.title, sections: document.querySelectorAll('section').length};
  for (const svg of document.querySelectorAll('svg.chart')) {
    const box = svg.getBoundingClientRect();
    const area = (svg.querySelector('.plot-area') || svg).getBoundingClientRect();
    const inside = r => r.width + r.height > 0 && r.left >= area.left - 6 && r.right <= area.right + 6 &&
                        r.top >= area.top - 6 && r.bottom <= area.bottom + 6;
    const marks = {};
    for (const m of svg.querySelectorAll('.mark, .band')) {
      const k = [...m.classList].slice(1).join(' ');
      marks[k] = marks[k] || {n: 0, inside: 0};
      marks[k].n++;
      if (inside(m.getBoundingClientRect())) marks[k].inside++;
    }
    out.charts.push({
      cls: svg.getAttribute('class'), data: Object.assign({}, svg.dataset), width: box.width, height: box.height,
      section: svg.closest('section') ? svg.closest('section').dataset.conversation : null, marks,
      bars: [...svg.querySelectorAll('.bar')].map(b => [Number(b.dataset.count), b.getBoundingClientRect().height]),
      lines: [...svg.querySelectorAll('.series')].map(p => [p.dataset.name, p.points.numberOfItems, p.getBBox().width]),
      texts: [...svg.querySelectorAll('text')].map(t => t.textContent),
      points: [...svg.querySelectorAll('.mark')].slice(0, 2000).map(m => {
        const r = m.getBoundingClientRect();
        const t = m.querySelector('title');
        return [[...m.classList].slice(1).join(' '), t ? t.textContent : '', r.left + r.width / 2 - area.left,
                r.top + r.height / 2 - area.top];
      }),
      groups: [...svg.querySelectorAll('g[class]')].map(g => [g.getAttribute('class'), Object.assign({}, g.dataset),
                                                           g.getBoundingClientRect().width,
                                                           g.getBoundingClientRect().top - box.top]),
    });
  }
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def chromium() -> str:
    exe = shutil.which("chromium")
    assert exe, "chromium is required (apt-get install chromium; ./dev test installs it)"
    return exe


def _probe(page: Path, tmp: Path, script: str, suffix: str, *flags: str) -> dict:
    """What `script`, added to the end of `page`'s body, writes as JSON into <pre id="probe"> once headless
    Chromium (with `flags` besides its usual ones) has laid the page out; the page copy is tmp/<stem><suffix>."""
    text = page.read_text(encoding="utf-8")
    probe = tmp / (page.stem + suffix)
    probe.write_text(text.replace("</body>", script + "</body>"), encoding="utf-8")
    r = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            f"--user-data-dir={tmp / 'chromium-profile'}",
            *flags,
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, re.S)
    assert m, f"the page did not render in chromium: {r.stderr[-500:]}"
    return json.loads(html.unescape(m.group(1)))


def render(page: Path, tmp: Path) -> dict:
    """The probe's findings for `page` as Chromium lays it out."""
    return _probe(page, tmp, PROBE, ".probe.html", "--window-size=1200,900")


def self_contained(text: str) -> bool:
    """No script, stylesheet link, import or reference that would fetch anything."""
    return not re.search(
        r"<script|<link|@import|<iframe|<img|(src|href)\s*=\s*['\"]?(https?:|//|file:)|url\((?!#)", text, re.I
    )


WIDTH_PROBE = r"""<script>
addEventListener('load', () => {
  const d = document.documentElement, wide = [];
  for (const e of document.body.querySelectorAll('*')) {
    const r = e.getBoundingClientRect();
    const clipped = e.parentElement && e.parentElement.closest('table, svg') !== null;   // scrolls or scales inside
    if (r.right > d.clientWidth + 1 && !clipped) wide.push(e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + ' ' + Math.round(r.right));
  }
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify({scrollWidth: d.scrollWidth, clientWidth: d.clientWidth, wide: wide.slice(0, 20)});
  document.body.appendChild(pre);
});
</script>"""


def page_width(page: Path, tmp: Path, width: int = 1280) -> dict:
    """How wide `page` lays out in a `width`-pixel window: the document's scrollWidth and the elements
    reaching past the window's right edge."""
    return _probe(page, tmp, WIDTH_PROBE, ".width.html", f"--window-size={width},900", "--virtual-time-budget=5000")

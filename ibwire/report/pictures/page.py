"""One self-contained HTML page (inline CSS and SVG, nothing fetched) and its atomic writing.  A page fits a
1280 px window: pictures scale down to the page's width (viewBox), a wider table scrolls inside it."""

from ibwire.files.outfile import output_file
from ibwire.report.pictures.svg import esc

SVG_CSS = """
svg.chart{display:block;margin:.4em 0 1em;font-size:11px;font-family:system-ui,sans-serif;max-width:100%;height:auto}
svg .plot-area{fill:#fcfcfc;stroke:#999}svg .grid{stroke:#e4e4e4}svg .title{font-weight:bold;font-size:12px}
svg .tick{fill:#555;font-size:10px}svg .label{fill:#333}
"""
CSS = (
    """
body{font-family:system-ui,sans-serif;margin:1.5em 2em;color:#222;max-width:1100px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}h3{font-size:1em}
table{border-collapse:collapse;margin:.6em 0;display:block;max-width:100%;overflow-x:auto}td,th{border:1px solid #ccc;padding:.25em .5em;font-size:.85em;
text-align:left}th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#666;font-size:.85em}.qp{border-left:4px solid #1f77b4;padding-left:1em}
code{font-family:ui-monospace,monospace;font-size:.9em}
"""
    + SVG_CSS
)


def page(title: str, body: str, kind: str) -> str:
    """The whole document; `kind` names the report for readers (data-report on <body>)."""
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<style>{CSS}</style></head><body data-report='{esc(kind)}'><h1>{esc(title)}</h1>{body}</body></html>"
    )


def write_html(path: str, text: str, inputs=()) -> None:
    """Write `text` to `path` whole or not at all, never over one of the `inputs` (ibwire.files.outfile)."""
    with output_file(path, "w", inputs=inputs) as f:
        f.write(text)

"""Pictures of analysis results: self-contained HTML pages with inline SVG (no script, no network).

svg.py draws axes, lines, marks and bars; page.py wraps sections into one page and writes it;
ibwire.analyze.series computes the per-packet time series with numpy; flows_report, ladder, fabric_report and
timeline turn analysis results into sections.
"""

"""Audit results as a terminal verdict (rich), JSON, Markdown, or one self-contained HTML page."""
from __future__ import annotations

import html
import json

from ..analysis.report import plural
from .findings import SEVERITIES
from .identity import NO_TENANT, policy_port
from .result import Result

COLOURS = {None: "#e8f5e9", "info": "#e3f2fd", "warning": "#fff3cd", "attempt": "#ffd8a8", "breach": "#f8b4b4"}
RICH = {None: "green", "info": "blue", "warning": "yellow", "attempt": "dark_orange", "breach": "bold red"}


def _per_port(res: Result) -> list:
    """Rows of policy vs hardware state vs wire for every port the audit knows."""
    audit = res.audit
    rows = []
    for guid, ps in sorted(res.ports.ports.items()):
        port = policy_port(res.ports, guid)
        pol = ", ".join(f"0x{pk:04x} {m}" for pk, m in sorted(audit.policy.membership(port).items()))
        hw = "unknown" if ps.pkeys is None else ", ".join(f"0x{p:04x}" for p in sorted(ps.table()))
        wire = sorted({fl.pkey for fl in audit.traffic.flows.values() if fl.src.kind == "ib" and
                       (fl.src.lid == ps.lid or (fl.src.gid and fl.src.gid.endswith(f"{guid & 0xffff:x}")))
                       and ps.lid is not None})
        ep = audit.tenants.endpoint_of(guid)
        tenant = ep.tenant if ep else NO_TENANT
        rows.append({"port_guid": f"0x{guid:016x}", "lid": ps.lid, "type": ps.node_type, "tenant": tenant,
                     "description": ps.description, "policy": pol, "hardware": hw,
                     "hardware_source": ps.pkey_source or "", "wire": ", ".join(f"0x{p:04x}" for p in wire),
                     "mapping_source": ps.source})
    return rows


def scope(res: Result) -> str:
    """What the verdict covers when a display filter chose the frames (empty without one)."""
    if not res.display_filter:
        return ""
    return (f"Display filter applied: only the frames matching '{res.display_filter}' were audited; the "
            f"verdict covers those frames, not the whole capture.")


def as_dict(res: Result, fail_on: str) -> dict:
    names = res.tenant_names()
    return {
        "verdict": res.verdict(fail_on), "fail_on": fail_on, "worst": res.worst(),
        "display_filter": res.display_filter, "scope": scope(res) or None,
        "packets": res.audit.packets, "frames": res.audit.frames_seen, "evidence": res.evidence.as_dict(),
        "tenants": names,
        "matrix": [{"from": a, "to": b, "packets": c[0], "bytes": c[1], "worst": c[2]}
                   for a in names for b in names for c in [res.cell(a, b)] if c[0] or c[2]],
        "findings": [f.as_dict() for f in res.findings],
        "endpoint_mappings": [{"tenant": ep.tenant, "endpoint": ep.describe(), "mapping": text}
                              for ep, text in res.audit.mappings],
        "unnamed_endpoints": res.audit.unnamed,
        "ports": _per_port(res),
    }


def to_json(res: Result, fail_on: str) -> str:
    return json.dumps(as_dict(res, fail_on), indent=2)


def to_markdown(res: Result, fail_on: str) -> str:
    d = as_dict(res, fail_on)
    names = d["tenants"]
    out = [f"# Isolation audit: {d['verdict']}", "",
           f"{plural(d['packets'], 'IB/RoCE packet')} in {plural(d['frames'], 'frame')}; worst finding: "
           f"{d['worst'] or 'none'} "
           f"(fail on {fail_on}).", ""] + ([f"**{d['scope']}**", ""] if d["scope"] else []) + [
           "| from \\ to | " + " | ".join(names) + " |",
           "|---" * (len(names) + 1) + "|"]
    for a in names:
        cells = []
        for b in names:
            p, by, w = res.cell(a, b)
            cells.append(f"{p} pkts / {by} B" + (f" **{w}**" if w else "") if p or w else "·")
        out.append(f"| **{a}** | " + " | ".join(cells) + " |")
    out += ["", "## Findings", ""]
    if not d["findings"]:
        out.append("None.")
    for f in d["findings"]:
        out.append(f"{f['number']}. **{f['severity']}** `{f['rule']}`: {f['description']}" +
                   (f" (frames {', '.join(map(str, f['frames']))})" if f["frames"] else ""))
        out += [f"   - Wireshark {label}: `{text}`" for label, text in _filters(f["wireshark"])]
    return "\n".join(out) + "\n"


_FILTER_LABELS = (("frames", "frames"), ("evidence", "in the --evidence file"), ("semantic", "filter"))


def _filters(w: dict) -> list:
    """(label, display filter) of a finding's Wireshark filters that are not empty."""
    return [(label, w[k]) for k, label in _FILTER_LABELS if w.get(k)]


def print_terminal(res: Result, fail_on: str, console=None) -> None:
    from rich.table import Table

    from ..analysis.report import console as text_console
    console = console or text_console()
    verdict = res.verdict(fail_on)
    colour = "bold green" if verdict == "PASS" else "bold yellow" if verdict.startswith("PASS") else "bold red"
    console.print(f"[{colour}]{verdict}[/]  "
                  f"{plural(res.audit.packets, 'packet')}, {plural(len(res.findings), 'finding')}, "
                  f"worst: {res.worst() or 'none'} "
                  f"(fail on {fail_on})")
    if res.display_filter:
        console.print(f"[bold yellow]{scope(res)}[/]", highlight=False, soft_wrap=True)
    names = res.tenant_names()
    if names:
        t = Table(title="tenant × tenant (packets / bytes / worst finding)")
        t.add_column("from \\ to", style="bold")
        for b in names:
            t.add_column(b)
        for a in names:
            row = []
            for b in names:
                p, by, w = res.cell(a, b)
                row.append(f"[{RICH[w]}]{p} / {by}" + (f" {w}" if w else "") + "[/]" if p or w else "·")
            t.add_row(a, *row)
        console.print(t)
    for f in res.findings:
        console.print(f"{f.number:3} [{RICH[f.severity]}]{f.severity:8}[/] {f.rule:24} {f.description}" +
                      (f"  [dim]frames {', '.join(map(str, f.frames))}[/]" if f.frames else ""), highlight=False)
        for label, text in _filters(f.wireshark):
            console.print(f"    [dim]wireshark {label}:[/] {text}", highlight=False, soft_wrap=True)


_CSS = """table,pre{display:block;max-width:100%;overflow-x:auto}
body{font-family:system-ui,sans-serif;margin:2em;color:#222}h1 .PASS{color:#1b5e20}h1 .FAIL{color:#b71c1c}h1 .PARTIAL{color:#9a6700}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:.35em .6em;font-size:.9em;
vertical-align:top}th{background:#f1f1f1}.grid td{text-align:center;min-width:7em}.sev{font-weight:bold}
code,pre{font-family:ui-monospace,monospace;font-size:.85em}.finding{border-left:6px solid #999;padding:.2em 1em;
margin:1em 0}.legend span{padding:.2em .6em;margin-right:.4em}.ws code{background:#f4f4f4;padding:0 .3em}
details.frame{margin:.4em 0}details.frame:target{outline:2px solid #1565c0}
"""


def _verdict_class(verdict: str) -> str:
    """PASS, FAIL, INCOMPLETE, or PARTIAL for a PASS on incomplete evidence."""
    return "PARTIAL" if verdict.startswith("PASS (") else verdict


def to_html(res: Result, fail_on: str, summaries: dict, paths=()) -> str:
    from ..pictures.audit_pictures import audit_pictures
    e = html.escape
    d = as_dict(res, fail_on)
    names = d["tenants"]
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>ibwire isolation audit</title>",
             f"<style>{_CSS}</style></head><body>",
             f"<h1>Isolation audit: <span class='{_verdict_class(d['verdict'])}' id='verdict'>{e(d['verdict'])}"
             "</span></h1>",
             f"<p>{plural(d['packets'], 'IB/RoCE packet')} in {plural(d['frames'], 'frame')}; "
             f"{plural(len(d['findings']), 'finding')}; worst: "
             f"{e(str(d['worst'] or 'none'))}; fails on {e(fail_on)} or worse.</p>",
             f"<p id='scope'><strong>{e(d['scope'])}</strong></p>" if d["scope"] else "",
             "<p class='legend'>" + "".join(f"<span style='background:{COLOURS[s]}'>{s or 'clean'}</span>"
                                            for s in (None,) + SEVERITIES) + "</p>",
             "<h2>Tenant × tenant</h2><table class='grid' id='matrix'><tr><th>from \\ to</th>" +
             "".join(f"<th>{e(b)}</th>" for b in names) + "</tr>"]
    for a in names:
        parts.append(f"<tr><th>{e(a)}</th>")
        for b in names:
            p, by, w = res.cell(a, b)
            body = f"{p} pkts<br>{by} B" + (f"<br><span class='sev'>{w}</span>" if w else "") if p or w else "·"
            parts.append(f"<td style='background:{COLOURS[w] if (p or w) else '#fff'}' "
                         f"data-from='{e(a)}' data-to='{e(b)}' data-worst='{w or ''}'>{body}</td>")
        parts.append("</tr>")
    parts.append("</table>" + audit_pictures(res, paths) + "<h2>Findings</h2><div id='findings'>")
    if not d["findings"]:
        parts.append("<p>No findings.</p>")
    for f in d["findings"]:
        parts.append(f"<div class='finding' data-rule='{e(f['rule'])}' style='border-color:"
                     f"{COLOURS[f['severity']]}'><p><span class='sev'>{e(f['severity'])}</span> "
                     f"<code>{e(f['rule'])}</code> {e(f['description'])}</p>")
        parts.append("<ul class='ws'>" + "".join(f"<li>Wireshark {e(label)}: <code>{e(text)}</code></li>"
                                               for label, text in _filters(f["wireshark"])) + "</ul>")
        if f["frames"]:
            parts.append("<table><tr><th>frame</th><th>decoded</th></tr>" + "".join(
                f"<tr><td><a href='#frame-{n}'>{n}</a></td><td><code>{e(_summary(summaries.get(n)))}</code></td></tr>"
                for n in f["frames"]) + "</table>")
        parts.append("</div>")
    parts.append("</div><h2>Per port: policy, hardware state, wire</h2><table id='ports'><tr><th>port GUID</th>"
                 "<th>LID</th><th>type</th><th>tenant</th><th>policy (partitions.conf)</th><th>hardware P_Key table"
                 "</th><th>P_Keys sent on the wire</th><th>mapping source</th></tr>")
    for r in d["ports"]:
        parts.append("<tr>" + "".join(f"<td>{e(str(r[k] if r[k] is not None else ''))}</td>" for k in
                                      ("port_guid", "lid", "type", "tenant", "policy")) +
                     f"<td>{e(r['hardware'])}<br><small>{e(r['hardware_source'])}</small></td>"
                     f"<td>{e(r['wire'])}</td><td>{e(r['mapping_source'])}</td></tr>")
    parts.append("</table><h2>Endpoint mappings</h2><table><tr><th>tenant</th><th>endpoint</th><th>how</th></tr>")
    for m in d["endpoint_mappings"]:
        parts.append(f"<tr><td>{e(m['tenant'])}</td><td>{e(m['endpoint'])}</td><td>{e(m['mapping'])}</td></tr>")
    parts.append("</table>")
    if d["unnamed_endpoints"]:
        parts.append("<h2>Endpoints that belong to no tenant</h2><ul>" + "".join(
            f"<li>{e(k)}: {plural(v, 'packet')}</li>" for k, v in sorted(d["unnamed_endpoints"].items())) + "</ul>")
    parts.append(_frame_details(res, summaries))
    parts.append("</body></html>")
    return "".join(parts)


def _summary(decoded) -> str:
    return decoded if isinstance(decoded, str) or decoded is None else decoded.summary


def _frame_details(res: Result, decoded: dict) -> str:
    """Every evidence frame decoded layer by layer, each the target of the frame links above."""
    e = html.escape
    cited: dict = {}
    for f in res.findings:
        for n in f.frames:
            cited.setdefault(n, []).append(f.number)
    if not cited:
        return ""
    out = ["<h2>Evidence frames</h2><div id='evidence'>"]
    for n in sorted(cited):
        d = decoded.get(n)
        refs = ", ".join(f"#{k}" for k in cited[n])
        out.append(f"<details class='frame' id='frame-{n}'><summary>frame {n} (findings {refs}): "
                   f"<code>{e(_summary(d) or '')}</code></summary>")
        layers = getattr(d, "layers", None)
        if layers:
            out.append("<pre>" + e(json.dumps(layers, indent=1, default=str)) + "</pre>")
        out.append("</details>")
    out.append("</div>")
    return "".join(out)

"""Audit results as a terminal verdict (rich), JSON, Markdown, or one self-contained HTML page."""

from __future__ import annotations

import html
import json

from ibwire.audit.findings import SEVERITIES, severity_rank
from ibwire.audit.identity import NO_TENANT, policy_port
from ibwire.audit.result import Result
from ibwire.report.escape import printable
from ibwire.words import plural

COLOURS = {None: "#e8f5e9", "info": "#e3f2fd", "warning": "#fff3cd", "attempt": "#ffd8a8", "breach": "#f8b4b4"}
RICH = {None: "green", "info": "blue", "warning": "yellow", "attempt": "dark_orange", "breach": "bold red"}


def _per_port(res: Result) -> list:
    """Rows of policy vs hardware state vs wire for every port the audit knows."""
    audit = res.audit
    by_lid, by_tail = _wire_pkeys(audit.traffic.flows.values())
    first: dict = {}
    for ep in audit.tenants.endpoints:  # Tenants.endpoint_of, for every port at once
        if ep.port_guid is not None:
            first.setdefault(ep.port_guid, ep)
    rows = []
    for guid, ps in sorted(res.ports.ports.items()):
        port = policy_port(res.ports, guid)
        pol = ", ".join(f"0x{pk:04x} {m}" for pk, m in sorted(audit.policy.membership(port).items()))
        hw = "unknown" if ps.pkeys is None else ", ".join(f"0x{p:04x}" for p in sorted(ps.table()))
        wire = [] if ps.lid is None else sorted(by_lid.get(ps.lid, set()) | by_tail.get(f"{guid & 0xFFFF:x}", set()))
        ep = first.get(guid)
        tenant = ep.tenant if ep else NO_TENANT
        rows.append(
            {
                "port_guid": f"0x{guid:016x}",
                "lid": ps.lid,
                "type": ps.node_type,
                "tenant": tenant,
                "description": ps.description,
                "policy": pol,
                "hardware": hw,
                "hardware_source": ps.pkey_source or "",
                "wire": ", ".join(f"0x{p:04x}" for p in wire),
                "mapping_source": ps.source,
            }
        )
    return rows


def _wire_pkeys(flows) -> tuple:
    """The P_Keys IB flows send, by source LID and by every ending (1-4 characters) of the source GID's last
    group: a port's own are then those of its LID and of its GUID's low 16 bits in hex (an ending of the
    GID's text), found by lookup instead of a pass over all flows per port."""
    by_lid: dict = {}
    by_tail: dict = {}
    for fl in flows:
        if fl.src.kind != "ib":
            continue
        by_lid.setdefault(fl.src.lid, set()).add(fl.pkey)
        if fl.src.gid:
            last = fl.src.gid.rsplit(":", 1)[-1]
            for k in range(1, min(4, len(last)) + 1):
                by_tail.setdefault(last[-k:], set()).add(fl.pkey)
    return by_lid, by_tail


GRID_MAX = 16  # tenants (with "(no tenant)") a matrix is drawn as a grid for; more are listed by pair


def cells(res: Result) -> list:
    """[(from, to, packets, bytes, worst severity of the findings about the pair or None)] of the tenant
    pairs with traffic or a finding, in tenant order, in one pass over the traffic and the findings (N
    tenants have N² pairs, nearly all empty)."""
    names = res.tenant_names()
    rank = {n: i for i, n in enumerate(names)}
    out = {pair: [pb[0], pb[1], None] for pair, pb in res.matrix.items()}
    for f in res.findings:
        if f.tenants:
            c = out.setdefault(tuple(f.tenants), [0, 0, None])
            if c[2] is None or severity_rank(f.severity) > severity_rank(c[2]):
                c[2] = f.severity
    keep = [(a, b, *c) for (a, b), c in out.items() if a in rank and b in rank and (c[0] or c[2])]
    return sorted(keep, key=lambda c: (rank[c[0]], rank[c[1]]))


def compact(res: Result) -> tuple:
    """A matrix too large for a grid, as what matters: (the cells between two tenants or with a finding,
    (tenants, packets, bytes) of the quiet diagonal: traffic within a tenant and no finding)."""
    shown, quiet = [], [0, 0, 0]
    for c in cells(res):
        if c[0] == c[1] and c[4] is None:
            quiet = [quiet[0] + 1, quiet[1] + c[2], quiet[2] + c[3]]
        else:
            shown.append(c)
    return shown, tuple(quiet)


def compact_note(res: Result, quiet: tuple) -> str:
    n = len(res.tenant_names())
    return (
        f"{n} tenants are too many for a {n} × {n} grid: listed are the pairs of two different tenants and "
        f"any pair with a finding; traffic within a tenant with no finding about it is summed ({quiet[0]} "
        f"tenants, {quiet[1]} packets, {quiet[2]} bytes); --format json lists every pair with traffic"
    )


def scope(res: Result) -> str:
    """What the verdict covers when a display filter chose the frames (empty without one)."""
    if not res.display_filter:
        return ""
    return (
        f"Display filter applied: only the frames matching '{res.display_filter}' were audited; the "
        f"verdict covers those frames, not the whole capture."
    )


def as_dict(res: Result, fail_on: str) -> dict:
    names = res.tenant_names()
    return {
        "verdict": res.verdict(fail_on),
        "fail_on": fail_on,
        "worst": res.worst(),
        "display_filter": res.display_filter,
        "scope": scope(res) or None,
        "packets": res.audit.packets,
        "frames": res.audit.frames_seen,
        "evidence": res.evidence.as_dict(),
        "checks": res.checks(),
        "tenants": names,
        "matrix": [{"from": a, "to": b, "packets": p, "bytes": by, "worst": w} for a, b, p, by, w in cells(res)],
        "findings": [f.as_dict() for f in res.findings],
        "endpoint_mappings": [
            {"tenant": ep.tenant, "endpoint": ep.describe(), "mapping": text} for ep, text in res.audit.mappings
        ],
        "unnamed_endpoints": res.audit.unnamed,
        "ports": _per_port(res),
    }


def checks_text(checks: dict) -> str:
    """One sentence: the checks that ran, and each that could not with why."""
    out = "Checks run: " + ", ".join(checks["ran"]) + "."
    if checks["not_run"]:
        out += " Not run: " + "; ".join(f"{c} ({why})" for c, why in checks["not_run"].items()) + "."
    return out


def to_json(res: Result, fail_on: str) -> str:
    return json.dumps(as_dict(res, fail_on), indent=2)


def to_markdown(res: Result, fail_on: str) -> str:
    d = as_dict(res, fail_on)
    names = d["tenants"]
    out = [
        f"# Isolation audit: {d['verdict']}",
        "",
        f"{plural(d['packets'], 'IB/RoCE packet')} in {plural(d['frames'], 'frame')}; worst finding: "
        f"{d['worst'] or 'none'} (fail on {fail_on}).",
        "",
        checks_text(d["checks"]),
        "",
    ] + ([f"**{d['scope']}**", ""] if d["scope"] else [])
    out += _markdown_grid(res, names) if len(names) <= GRID_MAX else _markdown_pairs(res)
    out += ["", "## Findings", ""]
    if not d["findings"]:
        out.append("None.")
    for f in d["findings"]:
        out.append(
            f"{f['number']}. **{f['severity']}** `{f['rule']}`: {f['description']}"
            + (f" (frames {', '.join(map(str, f['frames']))})" if f["frames"] else "")
        )
        out += [f"   - Wireshark {label}: `{text}`" for label, text in _filters(f["wireshark"])]
    return "\n".join(map(printable, out)) + "\n"


def _markdown_grid(res: Result, names: list) -> list:
    at = {(a, b): (p, by, w) for a, b, p, by, w in cells(res)}
    out = ["| from \\ to | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for a in names:
        row = []
        for b in names:
            p, by, w = at.get((a, b), (0, 0, None))
            row.append(f"{p} pkts / {by} B" + (f" **{w}**" if w else "") if p or w else "·")
        out.append(f"| **{a}** | " + " | ".join(row) + " |")
    return out


def _markdown_pairs(res: Result) -> list:
    shown, quiet = compact(res)
    return [
        compact_note(res, quiet) + ".",
        "",
        "| from | to | packets | bytes | worst finding |",
        "|---|---|---|---|---|",
    ] + [f"| {a} | {b} | {p} | {by} | {f'**{w}**' if w else '·'} |" for a, b, p, by, w in shown]


_FILTER_LABELS = (("frames", "frames"), ("evidence", "in the --evidence file"), ("semantic", "filter"))


def _filters(w: dict) -> list:
    """(label, display filter) of a finding's Wireshark filters that are not empty."""
    return [(label, w[k]) for k, label in _FILTER_LABELS if w.get(k)]


def print_terminal(res: Result, fail_on: str, console=None) -> None:
    """The verdict, the tenant matrix and the findings for a terminal: every text from the inputs (tenant
    names, descriptions, filters) goes out as rich Text with its control characters escaped, never as
    markup, so a tenant named '[/bold]' or holding an escape sequence prints as written."""
    from rich.table import Table
    from rich.text import Text

    from ibwire.report.tables import console as text_console

    console = console or text_console()
    verdict = res.verdict(fail_on)
    colour = "bold green" if verdict == "PASS" else "bold yellow" if verdict.startswith("PASS") else "bold red"
    console.print(
        Text.assemble(
            (printable(verdict), colour),
            f"  {plural(res.audit.packets, 'packet')}, {plural(len(res.findings), 'finding')}, "
            f"worst: {res.worst() or 'none'} (fail on {fail_on})",
        )
    )
    if res.display_filter:
        console.print(Text(printable(scope(res)), style="bold yellow"), soft_wrap=True)
    if res.evidence.other:
        rest = ", ".join(
            f"{printable(p)} {n}" for p, n in sorted(res.evidence.out_of_scope.items(), key=lambda kv: -kv[1])
        )
        console.print(Text(f"{plural(res.evidence.other, 'frame')} out of scope (not InfiniBand or RoCE: {rest})"))
    checks = res.checks()
    if checks["not_run"]:
        console.print(Text(checks_text(checks), style="yellow"), soft_wrap=True)
    names = res.tenant_names()
    if names and len(names) <= GRID_MAX:
        at = {(a, b): (p, by, w) for a, b, p, by, w in cells(res)}
        t = Table(title="tenant × tenant (packets / bytes / worst finding)")
        t.add_column("from \\ to", style="bold")
        for b in names:
            t.add_column(Text(printable(b)))
        for a in names:
            row = []
            for b in names:
                p, by, w = at.get((a, b), (0, 0, None))
                row.append(Text(f"{p} / {by}" + (f" {w}" if w else ""), style=RICH[w]) if p or w else "·")
            t.add_row(Text(printable(a)), *row)
        console.print(t)
    elif names:
        _print_pairs(res, console)
    for f in res.findings:
        console.print(
            Text.assemble(
                f"{f.number:3} ",
                (f"{f.severity:8}", RICH[f.severity]),
                f" {f.rule:24} {printable(f.description)}",
                (f"  frames {', '.join(map(str, f.frames))}" if f.frames else "", "dim"),
            )
        )
        for label, text in _filters(f.wireshark):
            console.print(Text.assemble((f"    wireshark {label}:", "dim"), f" {printable(text)}"), soft_wrap=True)


def _print_pairs(res: Result, console) -> None:
    """A matrix too large for a grid: its cells that matter, one line each (see `compact`)."""
    from rich.text import Text

    shown, quiet = compact(res)
    console.print(Text(printable(f"tenant × tenant: {compact_note(res, quiet)}")), soft_wrap=True)
    for a, b, p, by, w in shown:
        console.print(
            Text.assemble(
                f"  {printable(a)} -> {printable(b)}: ", (f"{p} packets / {by} bytes" + (f" {w}" if w else ""), RICH[w])
            ),
            soft_wrap=True,
        )


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
    from ibwire.report.pictures.audit_pictures import audit_pictures

    e = html.escape
    d = as_dict(res, fail_on)
    names = d["tenants"]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>ibwire isolation audit</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Isolation audit: <span class='{_verdict_class(d['verdict'])}' id='verdict'>{e(d['verdict'])}</span></h1>",
        f"<p>{plural(d['packets'], 'IB/RoCE packet')} in {plural(d['frames'], 'frame')}; "
        f"{plural(len(d['findings']), 'finding')}; worst: "
        f"{e(str(d['worst'] or 'none'))}; fails on {e(fail_on)} or worse.</p>",
        f"<p id='scope'><strong>{e(d['scope'])}</strong></p>" if d["scope"] else "",
        f"<p id='checks'>{e(checks_text(d['checks']))}</p>",
        "<p class='legend'>"
        + "".join(f"<span style='background:{COLOURS[s]}'>{s or 'clean'}</span>" for s in (None,) + SEVERITIES)
        + "</p>",
        "<h2>Tenant × tenant</h2>",
    ]
    parts += _html_grid(res, names) if len(names) <= GRID_MAX else _html_pairs(res)
    parts.append("</table>" + audit_pictures(res, paths) + "<h2>Findings</h2><div id='findings'>")
    if not d["findings"]:
        parts.append("<p>No findings.</p>")
    for f in d["findings"]:
        parts.append(
            f"<div class='finding' data-rule='{e(f['rule'])}' style='border-color:"
            f"{COLOURS[f['severity']]}'><p><span class='sev'>{e(f['severity'])}</span> "
            f"<code>{e(f['rule'])}</code> {e(f['description'])}</p>"
        )
        parts.append(
            "<ul class='ws'>"
            + "".join(
                f"<li>Wireshark {e(label)}: <code>{e(text)}</code></li>" for label, text in _filters(f["wireshark"])
            )
            + "</ul>"
        )
        if f["frames"]:
            parts.append(
                "<table><tr><th>frame</th><th>decoded</th></tr>"
                + "".join(
                    f"<tr><td><a href='#frame-{n}'>{n}</a></td><td><code>{e(_summary(summaries.get(n)))}</code></td></tr>"
                    for n in f["frames"]
                )
                + "</table>"
            )
        parts.append("</div>")
    parts.append(
        "</div><h2>Per port: policy, hardware state, wire</h2><table id='ports'><tr><th>port GUID</th>"
        "<th>LID</th><th>type</th><th>tenant</th><th>policy (partitions.conf)</th><th>hardware P_Key table"
        "</th><th>P_Keys sent on the wire</th><th>mapping source</th></tr>"
    )
    for r in d["ports"]:
        parts.append(
            "<tr>"
            + "".join(
                f"<td>{e(str(r[k] if r[k] is not None else ''))}</td>"
                for k in ("port_guid", "lid", "type", "tenant", "policy")
            )
            + f"<td>{e(r['hardware'])}<br><small>{e(r['hardware_source'])}</small></td>"
            f"<td>{e(r['wire'])}</td><td>{e(r['mapping_source'])}</td></tr>"
        )
    parts.append("</table><h2>Endpoint mappings</h2><table><tr><th>tenant</th><th>endpoint</th><th>how</th></tr>")
    for m in d["endpoint_mappings"]:
        parts.append(f"<tr><td>{e(m['tenant'])}</td><td>{e(m['endpoint'])}</td><td>{e(m['mapping'])}</td></tr>")
    parts.append("</table>")
    if d["unnamed_endpoints"]:
        parts.append(
            "<h2>Endpoints that belong to no tenant</h2><ul>"
            + "".join(f"<li>{e(k)}: {plural(v, 'packet')}</li>" for k, v in sorted(d["unnamed_endpoints"].items()))
            + "</ul>"
        )
    parts.append(_frame_details(res, summaries))
    parts.append("</body></html>")
    return "".join(parts)


def _html_cell(a: str, b: str, p: int, by: int, w) -> str:
    e = html.escape
    body = f"{p} pkts<br>{by} B" + (f"<br><span class='sev'>{w}</span>" if w else "") if p or w else "·"
    return (
        f"<td style='background:{COLOURS[w] if (p or w) else '#fff'}' data-from='{e(a)}' data-to='{e(b)}' "
        f"data-worst='{w or ''}'>{body}</td>"
    )


def _html_grid(res: Result, names: list) -> list:
    e = html.escape
    at = {(a, b): (p, by, w) for a, b, p, by, w in cells(res)}
    parts = [
        "<table class='grid' id='matrix'><tr><th>from \\ to</th>" + "".join(f"<th>{e(b)}</th>" for b in names) + "</tr>"
    ]
    for a in names:
        parts.append(
            f"<tr><th>{e(a)}</th>" + "".join(_html_cell(a, b, *at.get((a, b), (0, 0, None))) for b in names) + "</tr>"
        )
    return parts


def _html_pairs(res: Result) -> list:
    e = html.escape
    shown, quiet = compact(res)
    return [
        f"<p id='matrix-note'>{e(compact_note(res, quiet))}.</p><table class='grid' id='matrix'><tr><th>from"
        "</th><th>to</th><th>packets / bytes / worst finding</th></tr>"
    ] + [f"<tr><th>{e(a)}</th><th>{e(b)}</th>{_html_cell(a, b, p, by, w)}</tr>" for a, b, p, by, w in shown]


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
        out.append(
            f"<details class='frame' id='frame-{n}'><summary>frame {n} (findings {refs}): "
            f"<code>{e(_summary(d) or '')}</code></summary>"
        )
        layers = getattr(d, "layers", None)
        if layers:
            out.append("<pre>" + e(json.dumps(layers, indent=1, default=str)) + "</pre>")
        out.append("</details>")
    out.append("</div>")
    return "".join(out)

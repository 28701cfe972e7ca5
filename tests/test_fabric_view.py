"""`ibwire fabric` against ground truth: smpquery on the same simulated fabric after opensm programmed it
(P_Keys, LIDs), the topology file (nodes, links), opensm's own port (master SM), and for the link-rate
flag a crafted capture whose PortInfo values the scenario declares."""

import json
import re

import pytest
from fabric import scenario
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point

from dissectors.mad import MAD
from dissectors.mad.smp import NodeInfo, PortInfo, SMPDirected
from dissectors.numbers import LINKTYPE_ERF
from ibwire.analyze.fabric import fabric_view
from ibwire.capture.ibsim_wire import ib_packet
from ibwire.files.writers import PcapWriter, erf_record


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    r = scenario.run(str(tmp_path_factory.mktemp("fabric")))
    r["view"] = fabric_view(r["path"])
    return r


def _smpquery_pkeys(text):
    return [
        int(v, 16) for line in text.splitlines() if re.match(r"\s*\d+:", line) for v in line.split(":", 1)[1].split()
    ]


def _smpquery_field(text, name):
    return int(re.search(rf"^{name}:\.+(\S+)", text, re.M).group(1), 0)


def _port(view, node_guid, num):
    return next(p for p in view["ports"] if p["node_guid"] == node_guid and p["port_num"] == num)


def test_fabric_pkey_tables_match_smpquery_after_opensm(sim):
    view, truth = sim["view"], sim["truth"]
    types = {n["guid"]: n["type"] for n in view["nodes"]}
    lid_port = {
        p["lid"]: p for p in view["ports"] if p["lid"] and (types[p["node_guid"]] == "CA" or p["port_num"] == 0)
    }
    checked = 0
    for lid in (1, 2, 3, 4):
        theirs = _smpquery_pkeys(truth[("pkeys", lid)])
        ours = lid_port[lid]["pkey_table"]
        assert ours[: len(theirs)] == theirs[: len(ours)] and len(ours) >= min(len(theirs), 32), lid
        checked += 1
    switch = next(n["guid"] for n in view["nodes"] if n["type"] == "Switch")
    for swport in (1, 2, 3):
        theirs = _smpquery_pkeys(truth[("pkeys-sw", swport)])
        assert _port(view, switch, swport)["pkey_table"] == theirs[: len(_port(view, switch, swport)["pkey_table"])]
    # partitions.conf: Hca2 (0x100004) limited in TenantA (0x0001), full in TenantB (0x8002)
    hca2 = next(p for p in view["ports"] if p["guid"] == 0x100004)
    assert hca2["pkeys"] == [0xFFFF, 0x0001, 0x8002] and checked == 4


def test_fabric_nodes_and_lids_match_the_fabric(sim):
    view, truth = sim["view"], sim["truth"]
    assert sorted((n["type"], n["description"]) for n in view["nodes"]) == [
        ("CA", "Hca1"),
        ("CA", "Hca2"),
        ("CA", "Hca3"),
        ("Switch", "Switch1"),
    ]
    for lid in (1, 2, 3, 4):
        guid = _smpquery_field(truth[("nodeinfo", lid)], "PortGuid")
        port = next(
            p
            for p in view["ports"]
            if p["guid"] == guid and p["lid"] is not None and (p["port_num"] != 0 or p["node_guid"] == guid)
        )
        assert port["lid"] == lid


def test_fabric_master_sm_is_opensm_port(sim):
    master = sim["view"]["sm"]["master"]
    hca1_port = next(p["guid"] for p in sim["view"]["ports"] if p["lid"] == sim["view"]["sm"]["master_lid"])
    assert master["state"] == "MASTER" and master["guid"] == hca1_port == 0x100001


def test_fabric_links_match_topology(sim):
    names = {n["guid"]: n["description"] for n in sim["view"]["nodes"]}
    links = {
        frozenset({(names[l["a"]["node_guid"]], l["a"]["port_num"]), (names[l["b"]["node_guid"]], l["b"]["port_num"])})
        for l in sim["view"]["links"]
    }
    topo = set()
    node = None
    for line in scenario.TOPOLOGY.read_text().splitlines():
        m = re.match(r'(Switch|Hca)\s+\d+\s+"(\w+)"', line)
        if m:
            node = m.group(2)
        m = re.match(r'\[(\d+)\]\s+"(\w+)"\[(\d+)\]', line)
        if m:
            topo.add(frozenset({(node, int(m.group(1))), (m.group(2), int(m.group(3)))}))
    assert links == topo
    assert all(l["active"] and l["best_supported_gbps"] >= l["active_gbps"] for l in sim["view"]["links"])


def test_fabric_reports_trap_144_from_hca2(sim):
    traps = sim["view"]["traps"]
    assert [(t["number"], t["issuer_lid"]) for t in traps] == [(144, 3)]
    assert traps[0]["details"]["trap.lidaddr"] == 3


def _dr(method, attr, mod, path, data, tid):
    """A directed-route SMP built with the MAD layers; `path` lists the exit ports."""
    hdr = MAD(mgmtclass=0x81, method=method, attributeid=attr, attributemodifier=mod, transactionid=tid)
    smp = SMPDirected(hopcount=len(path), d=1 if method & 0x80 else 0, initialpath=bytes([0, *path]).ljust(64, b"\0"))
    return bytes(hdr / smp / data)[:256].ljust(256, b"\0")


def _degraded_capture(path):
    """Scenario: an HDR CA (guid 0xa) behind an HDR switch (guid 0xb, port 7), both ends supporting and
    enabling 4X HDR, trained at 4X QDR — a link the view must flag."""
    hdr_port = dict(
        linkwidthsupported=0x02,
        linkwidthenabled=0x02,
        linkwidthactive=0x02,
        linkspeedsupported=0x7,
        linkspeedenabled=0x7,
        linkspeedactive=0x4,
        linkspeedextsupported=0x7,
        linkspeedextenabled=0x7,
        linkspeedextactive=0,
        portstate=4,
    )
    mads = [
        _dr(0x81, 0x11, 0, [], NodeInfo(nodetype=1, numports=1, nodeguid=0xA, portguid=0xA1, localportnum=1), 1),
        _dr(0x81, 0x15, 1, [], PortInfo(lid=5, localportnum=1, **hdr_port), 2),
        _dr(0x81, 0x11, 0, [1], NodeInfo(nodetype=2, numports=36, nodeguid=0xB, portguid=0xB, localportnum=7), 3),
        _dr(0x81, 0x15, 7, [1], PortInfo(localportnum=7, **hdr_port), 4),
    ]
    with PcapWriter(str(path), LINKTYPE_ERF) as w:
        for i, mad in enumerate(mads):
            w.write(erf_record(1.0 + i, ib_packet(0xFFFF, 0xFFFF, 0, 0, mad, i)), ts=1.0 + i)


def test_fabric_flags_link_trained_below_both_ends(tmp_path):
    _degraded_capture(tmp_path / "hdr.pcap")
    view = fabric_view(str(tmp_path / "hdr.pcap"))
    (link,) = view["links"]
    assert {(link["a"]["node_guid"], link["a"]["port_num"]), (link["b"]["node_guid"], link["b"]["port_num"])} == {
        (0xA, 1),
        (0xB, 7),
    }
    assert link["active"] == "4X QDR (40 Gb/s)" and link["best_enabled"] == "4X HDR (212.5 Gb/s)"
    assert link["below_enabled"] and link["below_supported"]
    text = run_ibwire("fabric", tmp_path / "hdr.pcap", check=True).stdout
    assert "DEGRADED" in text and "4X QDR" in text


def test_fabric_cli_json_and_errors(sim, tmp_path):
    r = run_ibwire("fabric", "--format", "json", sim["path"], check=True)
    assert json.loads(r.stdout) == json.loads(json.dumps(sim["view"]))
    (tmp_path / "junk.pcap").write_bytes(b"not a capture")
    r = run_ibwire("fabric", tmp_path / "junk.pcap")
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1


def _blocks(text):
    """ibnetdiscover output as a set of node blocks (its header, with the date and origin, left out)."""
    return {b.strip("\n") for b in text.split("\n\n") if not b.startswith("#")}


def test_fabric_ibnetdiscover_format_equals_real_ibnetdiscover(sim):
    """The SM sweep in the capture rebuilds what infiniband-diags' ibnetdiscover printed on the same fabric:
    every node block equal, byte for byte (ibnetdiscover orders nodes by its own discovery walk)."""
    ours = run_ibwire("fabric", "--format", "ibnetdiscover", sim["path"], check=True).stdout
    theirs = sim["outputs"]["ibnetdiscover"]
    assert _blocks(ours) == _blocks(theirs) and len(_blocks(ours)) == 4
    assert "# Initiated from node 0000000000100000 port 0000000000100001" in ours  # the master SM's port


def _graphviz(dot_text, tmp_path):
    """Graphviz's own reading of a DOT text (dot -Tjson): nodes by name with attributes, edges as name pairs."""
    import subprocess

    (tmp_path / "f.dot").write_text(dot_text)
    r = subprocess.run(["dot", "-Tjson", str(tmp_path / "f.dot")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    g = json.loads(r.stdout)
    objs = g.get("objects", [])
    edges = [(objs[e["tail"]]["name"], objs[e["head"]]["name"], e) for e in g.get("edges", [])]
    return {o["name"]: o for o in objs}, edges


def test_fabric_dot_format_reads_in_graphviz(sim, tmp_path):
    view = sim["view"]
    nodes, edges = _graphviz(run_ibwire("fabric", "--format", "dot", sim["path"], check=True).stdout, tmp_path)
    assert set(nodes) == {f"0x{n['guid']:016x}" for n in view["nodes"]}
    assert sorted(tuple(sorted(e[:2])) for e in edges) == sorted(
        tuple(sorted((f"0x{lk['a']['node_guid']:016x}", f"0x{lk['b']['node_guid']:016x}"))) for lk in view["links"]
    )
    assert [n for n, o in nodes.items() if o.get("peripheries") == "2"] == ["0x0000000000100000"]  # opensm on Hca1
    assert all(e[2]["label"] == "4X QDR (40 Gb/s)" for e in edges)
    _degraded_capture(tmp_path / "hdr.pcap")
    _, (edge,) = _graphviz(run_ibwire("fabric", "--format", "dot", tmp_path / "hdr.pcap", check=True).stdout, tmp_path)
    assert edge[2]["color"] == "red" and edge[2]["label"] == "4X QDR (40 Gb/s)"


def test_fabric_report_draws_topology_in_chromium(sim, tmp_path):
    from pictures_browser import render, self_contained

    out = tmp_path / "fabric.html"
    run_ibwire("fabric", sim["path"], "--report", out, check=True)
    assert self_contained(out.read_text())
    (topo,) = [c for c in render(out, tmp_path)["charts"] if c["cls"] == "chart topology"]
    view = sim["view"]
    drawn = [g for g in topo["groups"] if g[0].startswith("node")]
    assert sorted(int(d["guid"], 16) for _, d, *_ in drawn) == sorted(n["guid"] for n in view["nodes"])
    assert [int(d["guid"], 16) for c, d, *_ in drawn if "master-sm" in c.split()] == [0x100000]
    assert sum(1 for c, d, *_ in drawn if c.split()[1] == "switch") == 1
    links = [g for g in topo["groups"] if g[0].startswith("link")]
    assert len(links) == len(view["links"]) == 3 and all(w > 0 for _, _, w, *_ in links + drawn)
    assert all(d["active"] == "4X QDR (40 Gb/s)" for _, d, *_ in links)
    assert topo["texts"].count("4X QDR") == 3 and "master SM" in topo["texts"]
    # a link trained at 4X QDR between two 4X HDR ends is drawn degraded
    _degraded_capture(tmp_path / "hdr.pcap")
    run_ibwire("fabric", tmp_path / "hdr.pcap", "--report", tmp_path / "hdr.html", check=True)
    text = (tmp_path / "hdr.html").read_text()
    assert "class='link degraded'" in text and "data-degraded='1'" in text


def test_fabric_report_groups_cas_of_a_large_fabric():
    """Scenario: a spine, 4 leaves, 15 CAs per leaf (60, more than a drawing can hold one by one) and one CA
    link degraded to 1X: one box per leaf holds its CAs, and the degraded link still shows on its leaf."""
    import re

    from ibwire.report.pictures.topology import topology_svg

    nodes = [{"guid": 0x900, "type": "Switch", "description": "spine", "num_ports": 36}]
    links, ports = [], []
    for leaf in range(4):
        g = 0x800 + leaf
        nodes.append({"guid": g, "type": "Switch", "description": f"leaf{leaf}", "num_ports": 36})
        links.append(
            {
                "a": {"node_guid": 0x900, "port_num": leaf + 1},
                "b": {"node_guid": g, "port_num": 36},
                "active": "4X HDR (212.5 Gb/s)",
            }
        )
        for c in range(15):
            ca = 0x1000 + leaf * 100 + c
            bad = (leaf, c) == (2, 3)
            nodes.append({"guid": ca, "type": "CA", "description": f"n{leaf}-{c}", "num_ports": 1})
            ports.append({"node_guid": ca, "port_num": 1, "guid": ca + 1, "lid": ca})
            links.append(
                {
                    "a": {"node_guid": g, "port_num": c + 1},
                    "b": {"node_guid": ca, "port_num": 1},
                    "active": "1X HDR (53.125 Gb/s)" if bad else "4X HDR (212.5 Gb/s)",
                    "below_supported": bad,
                    "below_enabled": bad,
                }
            )
    svg = topology_svg({"nodes": nodes, "ports": ports, "links": links, "sm": {"master": None, "master_lid": None}})
    groups = re.findall(r"<g class='node group' data-guid='group-(0x[0-9a-f]+)'", svg)
    assert sorted(groups) == ["0x800", "0x801", "0x802", "0x803"] and svg.count(">15 CAs<") == 4
    assert re.findall(r"<g class='link degraded' data-a='(0x[0-9a-f]+)/", svg) == ["0x802"]

"""The fast path (numpy records) and the detail path (scapy layers, ibwire.decode) agree on every field of
every packet of every test capture: public captures and the generator's samples."""

import ipaddress
from pathlib import Path

import numpy as np
import pytest

from dissectors.numbers import ETHERTYPE_MAC_CONTROL
from ibwire.decode import decode_frame
from ibwire.decode import records as R
from ibwire.decode.scan import read_all
from ibwire.files import iter_frames

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT.parent / "shared" / "captures" / "public"
CAPTURES = sorted(PUBLIC.glob("*.pcap")) + sorted((ROOT / "captures").glob("*.pcap"))

MACC_FIELDS = {f: key for f, key in R.FIELD_KEYS.items() if key.startswith("macc.")}  # MAC control frames
# record fields compared as plain integers when decode reports the key (on frames with a BTH)
INT_FIELDS = [
    f
    for f in R.FIELD_KEYS
    if R.RECORD[f].kind in "ui"
    and f not in MACC_FIELDS
    and f not in ("link", "flags", "icrc", "vcrc", "paylen", "vlan", "ecn", "pcp", "dscp", "caplen", "len", "frame")
]


def _mismatches(path):
    rec = read_all(str(path))
    frames = list(iter_frames(str(path)))
    assert len(rec) == len(frames)
    bad = []
    for r, fr in zip(rec, frames):
        flat = decode_frame(fr).flat
        want_bth = "bth" in flat
        got_bth = bool(r["flags"] & R.F_BTH)
        if want_bth != got_bth:
            bad.append((fr.number, "bth present", got_bth, want_bth))
            continue
        checks = {"frame.number": int(r["frame"]), "frame.cap_len": int(r["caplen"]), "frame.len": int(r["len"])}
        if got_bth:
            for f in INT_FIELDS:
                key = R.FIELD_KEYS[f]
                if key in flat:
                    checks[key] = int(r[f])
            if "atomiceth" in flat:  # Wireshark names the AtomicETH address and key reth.va / reth.r_key
                checks["reth.va"], checks["reth.r_key"] = int(r["atomic_va"]), int(r["atomic_r_key"])
            checks["icrc.status"] = R.CRC_STATUS[r["icrc"]]
            if r["vcrc"] != R.ABSENT:
                checks["vcrc.status"] = R.CRC_STATUS[r["vcrc"]]
            if "payload.length" in flat and not r["flags"] & R.F_TRUNCATED:
                checks["payload.length"] = int(r["paylen"])
        inner = "ipoib" in flat or "mad" in flat  # a payload decoded further: its own ip.*/payload.* keys
        if inner:
            checks.pop("payload.length", None)
            checks = {k: v for k, v in checks.items() if not k.startswith("udp.")}
        if "vlan.id" in flat:
            checks["vlan.id"] = int(r["vlan"])
            checks["vlan.priority"] = int(r["pcp"])
        for k in ("ip.dsfield.dscp", "ipv6.tclass.dscp"):
            if k in flat and got_bth and not inner:
                checks[k] = int(r["dscp"])
        if "grh.tclass" in flat and "ip" not in flat and "ipv6" not in flat:
            checks["grh.tclass"] = flat["grh.tclass"] & 3 | int(r["dscp"]) << 2
        for k in ("ip.dsfield.ecn", "ipv6.tclass.ecn"):
            if k in flat and got_bth:
                checks[k] = int(r["ecn"])
        for k, col in (
            ("ip.src", "src"),
            ("ip.dst", "dst"),
            ("ipv6.src", "src"),
            ("ipv6.dst", "dst"),
            ("grh.sgid", "src"),
            ("grh.dgid", "dst"),
        ):
            if k in flat and got_bth and not inner:
                checks[k] = bytes(r[col])
        for k, col in (("eth.src", "eth_src"), ("eth.dst", "eth_dst")):
            if k in flat:
                checks[k] = R.mac_text(r[col])
        if ("macc" in flat) != (r["etype"] == ETHERTYPE_MAC_CONTROL):
            bad.append((fr.number, "macc present", bool(r["etype"] == ETHERTYPE_MAC_CONTROL), "macc" in flat))
        for col, key in MACC_FIELDS.items():  # PAUSE and PFC: opcode, quanta, class-enable vector
            if key in flat:
                checks[key] = int(r[col])
        for k, v in checks.items():
            want = flat.get(k)
            if isinstance(want, str) and k.startswith(("ip", "grh")):
                a = ipaddress.ip_address(want)
                want = a.packed if a.version == 6 else b"\0" * 10 + b"\xff\xff" + a.packed
            if want != v:
                bad.append((fr.number, k, v, want))
    return bad


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_fast_path_matches_detail_path(path):
    bad = _mismatches(path)
    assert not bad, f"{len(bad)} differences, first: {bad[:10]}"


def test_every_capture_kind_is_covered():
    kinds = set()
    for p in CAPTURES:
        kinds |= {R.LINK_KINDS[k] for k in np.unique(read_all(str(p))["link"])}
    assert {"roce1", "roce2v4", "ib", "ib+grh"} <= kinds

"""`eth.src.oui_resolved`, `eth.dst.oui_resolved` and `eth.addr.oui_resolved`: the vendor names tshark 4.0 -n
writes in -T json and -T ek from Wireshark's manuf file (ibwire.report.packets.manuf reads this machine's).
Frame by frame the eth layer is tshark's, on RoCE frames whose MACs name a vendor (most printed by learned
programs), one with no vendor, multicast and broadcast; OUIs of the manuf file name tshark's vendor;
IBWIRE_MANUF points at another file (Wireshark 4.2+'s `tshark -G manuf` output too) or, naming none, leaves
the keys out; -V shows no vendor, as tshark -n.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from scapy.utils import rdpcap, wrpcap
from test_tcp_tshark import ROOT
from test_tshark_shapes import run_tshark

from ibwire.report.packets.manuf import ENV, SYSTEM, vendor

ODD = ["02:1b:01:00:00:07", "01:00:5e:00:00:01", "33:33:00:00:00:01", "ff:ff:ff:ff:ff:ff", "02:60:60:00:00:01"]
MELLANOX, INTEL = "b8:ce:f6:00:31:01", "00:1b:21:00:00:02"


def _ibwire(*args, manuf=None) -> str:
    exe = shutil.which("ibwire", path=str(Path(sys.executable).parent)) or "ibwire"
    env = {k: v for k, v in os.environ.items() if k != ENV} | ({ENV: str(manuf)} if manuf is not None else {})
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, check=True, env=env).stdout


def _crafted(path: Path) -> None:
    """300 RoCEv2 frames of the lab, from a Mellanox MAC to an Intel one, every 50th from or to another MAC."""
    frames = rdpcap(str(ROOT / "captures" / "rxe-rc-write-loss2.pcap"))[:300]
    for i, f in enumerate(frames):
        odd = ODD[i // 50 % len(ODD)] if i % 50 == 7 else None
        as_source = odd and i % 100 == 7 and not int(odd[:2], 16) & 1  # (a group address is no source)
        f.src, f.dst = (odd, INTEL) if as_source else (MELLANOX, odd or INTEL)
    wrpcap(str(path), frames)


def _eth_json(text: str) -> list:
    docs = json.loads(text, object_pairs_hook=lambda p: p)
    return [dict(dict(dict(d)["_source"])["layers"])["eth"] for d in docs]


def _eth_ek(text: str) -> list:
    out = []
    for line in text.splitlines():
        if not line.startswith('{"index"'):
            at = line.index('"eth":{')
            out.append(line[at : json.JSONDecoder().raw_decode(line, at + 6)[1]])
    return out


def test_eth_layer_is_tsharks(tmp_path, tshark):
    """-T json and -T ek: each frame's eth layer, with its vendor names, is tshark's."""
    assert os.path.isfile(SYSTEM[0]), "Wireshark's manuf file comes with tshark 4.0 (apt-get install tshark)"
    path = tmp_path / "vendors.pcap"
    _crafted(path)
    theirs = _eth_json(run_tshark(path, "-n", "-T", "json"))
    assert _eth_json(_ibwire("decode", path, "-T", "json")) == theirs
    assert sum("eth.src.oui_resolved" in dict(dict(e)["eth.src_tree"]) for e in theirs) >= 290
    assert _eth_ek(_ibwire("decode", path, "-T", "ek")) == _eth_ek(run_tshark(path, "-n", "-T", "ek"))


def _sample() -> list:
    """OUIs of the manuf file: one in 40, and each whose name is cut or is its short one."""
    out = []
    for i, line in enumerate(Path(SYSTEM[0]).read_text(encoding="utf-8").splitlines()):
        parts = [p.strip() for p in line.split("#")[0].split("\t") if p.strip()]
        if len(parts) >= 2 and len(parts[0]) == 8 and (i % 40 == 0 or len(parts) == 2 or len(parts[2]) > 60):
            out.append(int(parts[0].replace(":", ""), 16))
    return out


def test_vendors_are_tsharks(tmp_path, tshark):
    """OUIs of the manuf file: the vendor tshark names (a long name cut to 63 bytes, as Wireshark keeps it)."""
    ouis = _sample()
    assert len(ouis) > 1000
    head = bytes.fromhex("d4c3b2a1020004000000000000000000ffff000001000000")  # pcap, Ethernet
    record = bytes(8) + (60).to_bytes(4, "little") * 2
    rest = b"\0\0\1" + bytes.fromhex("b8cef6000002 88b5") + bytes(46)
    path = tmp_path / "ouis.pcap"
    path.write_bytes(head + b"".join(record + o.to_bytes(3, "big") + rest for o in ouis))
    theirs = run_tshark(path, "-n", "-T", "fields", "-e", "eth.dst.oui_resolved").split("\n")[: len(ouis)]
    assert [vendor(o) or "" for o in ouis] == theirs


def test_manuf_file_chosen(tmp_path):
    """IBWIRE_MANUF: another file's names (in Wireshark 4.0's form and in `tshark -G manuf`'s), or none; -V
    shows no vendor either way."""
    capture = ROOT / "captures" / "rxe-rc-send.pcap"  # MACs 02:1b:01:00:00:0x
    own = tmp_path / "manuf"
    own.write_text("# lab\n02:1B:01\tLab\tLab NICs Ltd.\t# ours\n00:02:C9         \tMellanoxTech\tMellanox\n")
    eth = _eth_json(_ibwire("decode", capture, "-T", "json", "-c", "3", manuf=own))
    assert [dict(dict(e)["eth.dst_tree"]).get("eth.dst.oui_resolved") for e in eth] == ["Lab NICs Ltd."] * 3
    assert "oui_resolved" not in _ibwire("decode", capture, "-T", "json", "-c", "3", manuf=tmp_path / "none")
    assert "oui_resolved" not in _ibwire("decode", capture, "-T", "ek", "-c", "3", manuf="")
    tree = _ibwire("decode", capture, "-V", "-c", "3", manuf=own)
    assert "Lab NICs" not in tree and tree == _ibwire("decode", capture, "-V", "-c", "3", manuf="")

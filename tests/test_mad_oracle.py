"""tshark as the oracle for MAD fields: frame building, tshark JSON flattening and value comparison,
shared by the test_mad_* modules (and tested here on values whose encoding tshark documents)."""

import ipaddress
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

from dissectors.crc import icrc_ib, vcrc
from dissectors.mad import MAD, flat
from dissectors.numbers import LINKTYPE_ERF
from ibwire.files.writers import PcapWriter, erf_record

PUBLIC = Path(__file__).resolve().parents[1].parent / "shared/captures/public"
TSHARK = shutil.which("tshark") or "/usr/bin/tshark"

# Where tshark 4.0.17 decodes a MAD field differently from the IBA spec (or opensm); each entry says why.
TSHARK_EXCEPTIONS = {
    "smpdirected.smpstatus": "tshark shows the whole 16-bit status word, D bit included; IBA 14.2.1.2 "
    "gives Status 15 bits after D",
    "cm.req.prim_flowlabel": "tshark masks a 3-byte read with 0xfffff000 (flow label is the top 20 of 32 bits)",
    "cm.req.prim_reserved0": "tshark reads the reserved bits from the first byte of the flow-label word",
    "cm.req.prim_pktrate": "tshark reads PacketRate from the first byte of the flow-label word (it is the 4th)",
    "cm.req.alt_flowlabel": "as cm.req.prim_flowlabel",
    "cm.req.alt_reserved0": "as cm.req.prim_reserved0",
    "cm.req.alt_pktrate": "as cm.req.prim_pktrate",
    "smpdirected.d": "tshark reads the D bit as a 64-bit field masked 0x8000 over one byte: always 0",
    "rmpp.rresptime": "tshark masks RRespTime with 0xf0 (4 bits); IBA 13.6.2.1 gives it the high 5 bits",
    "rmpp.rmppflags": "tshark masks RMPPFlags with 0x0f; IBA gives the low 3 bits (bit 3 is RRespTime)",
    "trap.datavalid": "tshark declares the 16-bit DataValid of trap 259 as an IPv6 address",
    "trap.swlidaddr": "tshark declares the 16-bit SWLIDADDR of trap 259 as an IPv6 address",
    "pathrecord.sl": "tshark reads SL as 16 bits masked 0x000f: same value, compared as int",
    "notice.datadetails": "tshark shows the 54 bytes after the details it decoded (offset bug), not DataDetails",
    "multicastforwardingtable.portmask": "tshark shows only the first 16 of the 32 port masks of a block",
}
# Fields whose tshark value is a prefix of ours (tshark shows fewer list entries).
PREFIX_COMPARE = {"multicastforwardingtable.portmask"}
# Fields tshark shows more than once: its attribute parser adds the SMP data item again (the same bytes for
# SLtoVLMappingTable; for a Notice, the bytes of its DataDetails offset bug, see notice.datadetails).
# Each of our values must be among tshark's.
REPEATED = {"smplid.smpdata"}
SKIP = set(TSHARK_EXCEPTIONS) - {"pathrecord.sl"} - PREFIX_COMPARE


def native_ib_frame(mad: bytes, dlid=1, slid=2, vl=None, psn=1) -> bytes:
    """LRH(LNH=2) + BTH(UD SEND Only) + DETH + MAD + ICRC + VCRC; QP0 for SMPs, QP1 otherwise."""
    qp = 0 if mad[1] in (0x01, 0x81) else 1
    vl = (15 if qp == 0 else 0) if vl is None else vl
    words = (8 + 12 + 8 + len(mad) + 4) // 4
    lrh = struct.pack(">BBHHH", vl << 4, 0x02, dlid, words & 0x7FF, slid)
    bth = struct.pack(">BBHI I", 0x64, 0, 0xFFFF, qp, psn & 0xFFFFFF)
    deth = struct.pack(">II", 0 if qp == 0 else 0x80010000, qp)
    body = lrh + bth + deth + mad
    body += struct.pack("<I", icrc_ib(body))
    return body + struct.pack("<H", vcrc(body))


def write_erf_pcap(path, mads):
    with PcapWriter(str(path), LINKTYPE_ERF) as w:
        for i, mad in enumerate(mads):
            w.write(erf_record(1700000000.0 + i, native_ib_frame(mad, psn=i + 1)), ts=1700000000.0 + i)


def _leaves(obj, out):
    for k, v in obj.items():
        if k.endswith("_tree") or not k.startswith("infiniband."):
            if isinstance(v, dict):
                _leaves(v, out)
            continue
        key = k[len("infiniband.") :]
        vals = v if isinstance(v, list) else [v]
        for x in vals:
            if isinstance(x, dict):
                _leaves(x, out)
            else:
                out.setdefault(key, []).append(x)


def tshark_packets(path):
    """[(info column, {field: [values]})] for every frame, from `tshark -T json --no-duplicate-keys`."""
    js = subprocess.run(
        [TSHARK, "-r", str(path), "-T", "json", "--no-duplicate-keys", "-e", "_ws.col.Info", "-e", "frame.number"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    infos = {
        int(p["_source"]["layers"]["frame.number"][0]): p["_source"]["layers"]["_ws.col.Info"][0]
        for p in json.loads(js)
    }
    js = subprocess.run(
        [TSHARK, "-r", str(path), "-T", "json", "--no-duplicate-keys"], capture_output=True, text=True, check=True
    ).stdout
    out = []
    for n, p in enumerate(json.loads(js), 1):
        fields = {}
        _leaves(p["_source"]["layers"].get("infiniband", {}), fields)
        out.append((infos.get(n, ""), fields))
    return out


_HEXBYTES = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2})*$")


def _norm(ours, theirs: str):
    """Bring a tshark JSON string to the type of our value."""
    if isinstance(ours, bool) or isinstance(ours, int):
        return int(theirs, 16) if theirs.startswith("0x") else int(theirs)
    if isinstance(ours, bytes):
        if _HEXBYTES.match(theirs):
            return bytes.fromhex(theirs.replace(":", ""))
        return theirs.encode("latin-1")
    if isinstance(ours, str):
        if _HEXBYTES.match(theirs) and len(theirs) == 47:
            return str(ipaddress.ip_address(bytes.fromhex(theirs.replace(":", ""))))
        try:
            return str(ipaddress.ip_address(theirs))
        except ValueError:
            return theirs
    return theirs


def _ours_for_compare(key, v):
    if key == "nodedescription.nodestring" and isinstance(v, bytes):
        return v.split(b"\0")[0]
    if isinstance(v, str):
        try:
            return str(ipaddress.ip_address(v))
        except ValueError:
            return v
    return v


def compare(ours: dict, theirs: dict):
    """(number of fields compared, [mismatch descriptions]) over the keys both decoders show."""
    compared, bad = 0, []
    for key, tvals in theirs.items():
        if key not in ours or key in SKIP:
            continue
        ovals = ours[key] if isinstance(ours[key], list) else [ours[key]]
        ovals = [_ours_for_compare(key, v) for v in ovals]
        try:
            tnorm = [_norm(ovals[0], t) for t in tvals] if ovals else []
        except ValueError as e:
            bad.append(f"{key}: cannot read tshark value {tvals!r}: {e}")
            continue
        if key in PREFIX_COMPARE:
            ovals = ovals[: len(tnorm)]
        if key in REPEATED:
            ovals, tnorm = [v for v in ovals if v not in tnorm], []
        compared += 1
        if ovals != tnorm:
            bad.append(f"{key}: ours {ovals!r} tshark {tnorm!r}")
    return compared, bad


def test_norm_reads_tshark_encodings():
    assert _norm(0, "0x0020") == 0x20 and _norm(0, "65535") == 65535
    assert _norm(b"", "00:02:c9") == b"\x00\x02\xc9"
    assert _norm("::", "fe80::2:c902:24:f636") == "fe80::2:c902:24:f636"
    assert _norm("::", "fe:80" + ":00" * 14) == "fe80::"


def test_frame_builder_crcs_accepted_by_tshark(tmp_path):
    mad = bytes(MAD(mgmtclass=0x81, attributeid=0x20)) + b"\0" * 232
    write_erf_pcap(tmp_path / "one.pcap", [mad[:256]])
    out = subprocess.run(
        [
            TSHARK,
            "-r",
            str(tmp_path / "one.pcap"),
            "-T",
            "fields",
            "-e",
            "infiniband.invariant.crc",
            "-e",
            "_ws.expert",
        ],
        capture_output=True,
        text=True,
    ).stdout
    assert out.strip() and "Malformed" not in out
    assert flat(MAD(mad))["mad.attributeid"] == 0x20

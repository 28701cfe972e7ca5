"""tshark as the oracle: run it on a capture and compare its `infiniband.*` fields with ibwire's.

Used by the differential tests of every layer, on the real captures in ../shared/captures/public (beside
the repository, as CI lays it out) and on the project's own.  tshark's JSON, read through pyshark, is
flattened to `key → [values]` with the `infiniband.` prefix removed; values are normalised (hex and
decimal strings to int, `aa:bb` bytes to hex, IPv6 canonical) and compared with `decode_frame().flat`.
"""

import ipaddress
import re
import shutil
from pathlib import Path

import pyshark

PUBLIC = Path(__file__).resolve().parents[1].parent / "shared" / "captures" / "public"
TSHARK = shutil.which("tshark")
PREFIXES = ("infiniband.", "infiniband_link.", "ipoib.")


def tshark_json(path, extra_args=()):
    """tshark's `-T json` packets of a capture, read through pyshark (tshark -T json --no-duplicate-keys, name
    resolution off), each as tshark writes it: {"_source": {"layers": {protocol: fields}}}, a protocol seen
    twice holding the list of its field sets."""
    cap = pyshark.FileCapture(str(path), use_json=True, keep_packets=False, custom_parameters=list(extra_args))
    out = []
    try:
        for pkt in cap:
            layers = {"frame": pkt.frame_info._all_fields}
            for x in pkt.layers:
                have = layers.get(x.layer_name)
                layers[x.layer_name] = x._all_fields if have is None else [*_as_list(have), x._all_fields]
            out.append({"_source": {"layers": layers}})
    finally:
        cap.close()
    return out


def _as_list(v):
    return v if isinstance(v, list) else [v]


def _flatten(obj, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, dict):
                _flatten(v, out)
            elif isinstance(v, list):
                for item in v:
                    if isinstance(item, (dict, list)):
                        _flatten(item, out)
                    else:
                        out.setdefault(k, []).append(item)
            else:
                out.setdefault(k, []).append(v)


def tshark_fields(packet):
    """{key without 'infiniband.': [normalised values]} for one tshark JSON packet."""
    raw = {}
    _flatten(packet["_source"]["layers"], raw)
    result = {}
    for key, values in raw.items():
        if key.endswith("_tree"):
            continue
        for p in PREFIXES:
            if key.startswith(p):
                name = key[len("infiniband.") :] if p == "infiniband." else key
                result[name] = [normalise(v) for v in values]
    return result


_BYTES = re.compile(r"^([0-9a-f]{2}:)+[0-9a-f]{2}$")


def normalise(value):
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        v = value.strip().lower()
        if _BYTES.match(v):
            return v.replace(":", "")
        if re.fullmatch(r"0x[0-9a-f]+", v):
            return int(v, 16)
        if re.fullmatch(r"-?\d+", v):
            return int(v)
        if v in ("true", "false"):
            return int(v == "true")
        try:
            return str(ipaddress.IPv6Address(v))
        except ValueError:
            return v
    return value


def _ours(value):
    """ibwire's values are typed already: ints stay ints, addresses become canonical, hex stays hex."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            return value.lower()
    return value


def agree(ours, theirs) -> bool:
    ours = _ours(ours)
    if isinstance(ours, list):
        return any(agree(o, theirs) for o in ours)
    if isinstance(ours, str) and ":" in ours and isinstance(theirs, str) and re.fullmatch(r"[0-9a-f]{32}", theirs):
        return ipaddress.IPv6Address(ours).packed.hex() == theirs  # a GID tshark shows as bytes
    if isinstance(ours, str) and isinstance(theirs, int):
        try:
            return int(ours, 16) == theirs
        except ValueError:
            return False
    if isinstance(ours, int) and isinstance(theirs, str) and re.fullmatch(r"[0-9a-f]+", theirs):
        return ours == int(theirs, 16)
    return ours == theirs


def compare(path, decoded, extra_args=(), ignore=()):
    """(mismatches, compared, missing): mismatches are (frame, key, tshark values, ours); `missing`
    maps keys tshark decodes but ibwire does not to a count."""
    packets = tshark_json(path, extra_args)
    assert len(packets) == len(decoded), f"{path}: tshark saw {len(packets)} packets, ibwire {len(decoded)}"
    mismatches, missing, compared = [], {}, 0
    for pkt, d in zip(packets, decoded):
        theirs = tshark_fields(pkt)
        for key, values in theirs.items():
            if key in ignore or key.split(".")[-1].startswith("reserved") or key == "reserved":
                continue
            if key not in d.flat:
                missing[key] = missing.get(key, 0) + 1
                continue
            ours = d.flat[key]
            if ours is True:  # presence marker for a whole header; tshark gives its bytes
                continue
            compared += 1
            if not any(agree(ours, v) for v in values):
                mismatches.append((d.frame.number, key, values, ours))
    return mismatches, compared, missing

"""NFSv3 results (RFC 1813 §3.3) and the call arguments after the first file handle, one table of steps
per procedure, into trees shaped and named as tshark 4.4 shows them (packet-nfs.c): fattr3, post_op_attr,
wcc_data and post_op_fh3 (§2.6), then each procedure's own items.  Every step appends to the tree as it
reads, so a body cut short keeps what came before the cut (the caller flags it)."""

import time
import zlib

FTYPES = {1: "Regular File", 2: "Directory", 3: "Block Device", 4: "Character Device", 5: "Symbolic Link"}
FTYPES.update({6: "Socket", 7: "Named Pipe"})
MODE_BITS = "suid sgid sticky rusr wusr xusr rgrp wgrp xgrp roth woth xoth".split()  # 0o4000 down to 0o1
ACCESS = ("read", "lookup", "modify", "extend", "delete", "execute")  # ACCESS3_* bits (§3.3.4)
FSF = (("setattr", 0x10), ("pathconf", 0x08), ("symlinks", 0x02), ("hardlinks", 0x01))  # FSF3_* (§3.3.19)
TIME_HOW = {0: "don't change", 1: "set to server time", 2: "set to client time"}  # time_how (§2.6)
SATTR_KEYS = {"uid": "nfs.uid3", "gid": "nfs.gid3", "size": "nfs.set_size"}
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()

_U64 = "size used fileid".split()
FIELDS = {
    **{f"nfs.fattr3.{n}": "uint" for n in "type nlink uid gid fsid".split() + _U64},
    **{f"nfs.mode3.{n}": "uint" for n in MODE_BITS},
    **{f"nfs.{t}.{n}": "uint" for t in ("atime", "mtime", "ctime", "dtime") for n in ("sec", "nsec")},
    **{f"nfs.{t}": "string" for t in ("atime", "mtime", "ctime", "dtime")},
    **{f"nfs.fsinfo.{n}": "uint" for n in "rtmax rtpref rtmult wtmax wtpref wtmult dtpref maxfilesize".split()},
    **{f"nfs.fsinfo.properties{n}": "uint" for n in ["", *(f".{name}" for name, _ in FSF)]},
    **{f"nfs.pathconf.{n}": "uint" for n in "linkmax name_max no_trunc chown_restricted".split()},
    **{f"nfs.pathconf.{n}": "uint" for n in ("case_insensitive", "case_preserving")},
    **{f"nfs.{n}": "uint" for n in "status mode3 specdata1 specdata2 attributes_follow handle_follow".split()},
    **{f"nfs.{n}": "uint" for n in "wcc_attr.size read.eof write.committed access_rights createmode".split()},
    **{f"nfs.{n}": "uint" for n in "set_it set_size uid3 gid3".split()},
    **{f"nfs.{n}": "bytes" for n in ("verifier", "data")},
}
DISPLAY = {"nfs.fattr3.fsid": 16, "nfs.access_rights": 8, "nfs.fsinfo.properties": 8, "nfs.verifier": -1}
DISPLAY["nfs.data"] = -1


def _abs(sec: int, nsec: int) -> str:
    """An nfstime3 as tshark writes an absolute time: `Nov 14, 2023 22:13:20.123456789 UTC`."""
    t = time.gmtime(sec)
    return f"{MONTHS[t.tm_mon - 1]} {t.tm_mday:2d}, {t.tm_year} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{nsec:09d} UTC"


def _time(x, out: list, name: str) -> None:
    """nfstime3 (§2.5) as nfs.<name> (absolute; dtime: seconds) and its seconds and nanoseconds."""
    sec, nsec = x.u32(), x.u32()
    text = f"{sec}.{nsec:09d}" if name == "dtime" else _abs(sec, nsec)
    out += [(f"nfs.{name}", text), (f"nfs.{name}_tree", [(f"nfs.{name}.sec", sec), (f"nfs.{name}.nsec", nsec)])]


def _mode(x, out: list) -> int:
    mode = x.u32()
    out += [
        ("nfs.mode3", mode),
        ("nfs.mode3_tree", [(f"nfs.mode3.{n}", mode >> (11 - i) & 1) for i, n in enumerate(MODE_BITS)]),
    ]
    return mode


def _fattr3(x, out: list) -> str:
    """fattr3 (§2.6) into `out`; returns tshark's summary of it (`Regular File mode: 0644 uid: 0 gid: 0`)."""
    ftype = x.u32()
    out.append(("nfs.fattr3.type", ftype))
    mode = _mode(x, out)
    out += [(f"nfs.fattr3.{n}", x.u32()) for n in ("nlink", "uid", "gid")]
    out += [(f"nfs.fattr3.{n}", x.u64()) for n in ("size", "used")]
    rdev = []
    out.append(("rdev", rdev))
    rdev += [("nfs.specdata1", x.u32()), ("nfs.specdata2", x.u32())]
    out[-1] = (f"rdev: {rdev[0][1]},{rdev[1][1]}", rdev)
    out += [("nfs.fattr3.fsid", x.u64()), ("nfs.fattr3.fileid", x.u64())]
    for name in ("atime", "mtime", "ctime"):
        _time(x, out, name)
    uid, gid = out[4][1], out[5][1]
    return f"{FTYPES.get(ftype, 'Unknown')} mode: {mode & 0o7777:04o} uid: {uid} gid: {gid}"


def _sub(out: list, label: str) -> list:
    sub = []
    out.append((label, sub))
    return sub


def _attrs(x, out: list, label: str) -> None:
    """fattr3 under `label` (GETATTR's result)."""
    sub = _sub(out, label)
    out[-1] = (f"{label}  {_fattr3(x, sub)}", sub)


def _post(x, out: list, label: str) -> None:
    """post_op_attr (§2.6): attributes_follow, then the fattr3 when it does."""
    sub = _sub(out, label)
    sub.append(("nfs.attributes_follow", x.u32()))
    if sub[0][1]:
        attrs = _sub(sub, "attributes")
        summary = _fattr3(x, attrs)
        sub[-1] = (f"attributes  {summary}", attrs)
        out[-1] = (f"{label}  {summary}", sub)


def _wcc(x, out: list, label: str) -> None:
    """wcc_data (§2.6): pre_op_attr (size, mtime, ctime) as `before`, post_op_attr as `after`."""
    sub = _sub(out, label)
    before = _sub(sub, "before")
    before.append(("nfs.attributes_follow", x.u32()))
    if before[0][1]:
        attrs = _sub(before, "attributes")
        attrs.append(("nfs.wcc_attr.size", x.u64()))
        _time(x, attrs, "mtime")
        _time(x, attrs, "ctime")
    _post(x, sub, "after")


def fh3(x) -> list:
    """nfs_fh3 (§2.5): an opaque of up to 64 bytes (NFSv4's nfs_fh4 up to 128), with Wireshark's hash."""
    n, fh, _ = x.opaque(128)
    return [("nfs.fh.length", n), ("nfs.fh.hash", zlib.crc32(fh)), ("nfs.fhandle", fh)]


def _fh(x, out: list, label: str) -> None:
    out.append((label, fh3(x)))


def _post_fh(x, out: list, label: str) -> None:
    """post_op_fh3 (§3.3.8): handle_follows, then the handle."""
    sub = _sub(out, label)
    sub.append(("nfs.handle_follow", x.u32()))
    if sub[0][1]:
        _fh(x, sub, "handle")


def _u32(x, out: list, key: str) -> None:
    out.append((key, x.u32()))


def _u64(x, out: list, key: str) -> None:
    out.append((key, x.u64()))


def _access(x, out: list, key: str) -> None:
    """ACCESS3resok's access (§3.3.4): the word and each ACCESS3_* bit."""
    bits = x.u32()
    out += [(key, bits), (f"{key}_tree", [(f"nfs.access_{n}", bits >> i & 1) for i, n in enumerate(ACCESS)])]


def _properties(x, out: list, key: str) -> None:
    bits = x.u32()
    out += [(key, bits), (f"{key}_tree", [(f"{key}.{n}", int(bits & b != 0)) for n, b in FSF])]


def _verifier(x, out: list, key: str) -> None:
    out.append((key, x.take(8)))


def _data(x, out: list, chunk, empty: bool) -> None:
    """opaque data<> (READ3resok, WRITE3args): its length and bytes.  Data moved in a chunk (RFC 8166
    §3.4.5; `chunk`: its bytes) leaves at most its length word in the message: shown then as tshark shows
    it, with the length (the chunk's when the word is gone) and, `empty`, an empty nfs.data."""
    if chunk is not None and len(x.data) - x.off <= 4:
        n = x.u32() if x.off < len(x.data) else chunk
        out.append(("Data: <DATA>", [("rpc.opaque_length", n)] + ([("nfs.data", b"")] if empty else [])))
        return
    n = x.u32()
    sub = _sub(out, "Data: <DATA>")
    sub += [("rpc.opaque_length", n), ("nfs.data", x.take(min(n, len(x.data) - x.off)))]
    x.take(n - len(sub[1][1]))
    if n & 3:
        sub.append(("rpc.fill_bytes", x.take(-n & 3)))


def _read_data(x, out: list, chunk) -> None:
    """READ3resok's data: in a write chunk tshark shows it empty."""
    _data(x, out, chunk, True)


def _write_data(x, out: list, chunk) -> None:
    """WRITE3args' data: in a read chunk ibwire shows its length only (tshark the bytes it reassembled)."""
    _data(x, out, chunk, False)


def _sattr3(x, out: list, label: str) -> None:
    """sattr3 (§2.6): each settable attribute's set_it, then its value when set."""
    sub = _sub(out, label)
    for name in ("mode", "uid", "gid", "size", "atime", "mtime"):
        item = _sub(sub, name)
        how = x.u32()
        item.append(("nfs.set_it", how))
        if name in ("atime", "mtime"):
            sub[-1] = (f"{name}: {TIME_HOW.get(how, 'Unknown')}", item)
            if how == 2:
                _time(x, item, name)
            continue
        sub[-1] = (f"{name}: {'value follows' if how else 'no value'}", item)
        if how and name == "mode":
            _mode(x, item)
        elif how:
            item.append((SATTR_KEYS[name], x.u64() if name == "size" else x.u32()))


def _createhow(x, out: list, label: str) -> None:
    """createhow3 (§3.3.8): the mode, then sattr3 (UNCHECKED, GUARDED) or the verifier (EXCLUSIVE)."""
    mode = x.u32()
    out.append(("nfs.createmode", mode))
    if mode == 2:
        _verifier(x, out, "nfs.verifier")
    else:
        _sattr3(x, out, label)


POST = (_post, "obj_attributes")
# Each procedure's resok and resfail steps after the status (§3.3): (step, its label or key)
RESULTS = {
    1: (((_attrs, "obj_attributes"),), ()),
    3: (((_fh, "object"), POST, (_post, "dir_attributes")), ((_post, "dir_attributes"),)),
    4: ((POST, (_access, "nfs.access_rights")), (POST,)),
    6: (
        ((_post, "file_attributes"), (_u32, "nfs.count3"), (_u32, "nfs.read.eof"), (_read_data, None)),
        ((_post, "file_attributes"),),
    ),
    7: (
        ((_wcc, "file_wcc"), (_u32, "nfs.count3"), (_u32, "nfs.write.committed"), (_verifier, "nfs.verifier")),
        ((_wcc, "file_wcc"),),
    ),
    8: (((_post_fh, "obj"), POST, (_wcc, "dir_wcc")), ((_wcc, "dir_wcc"),)),
    19: (
        (POST, *((_u32, f"nfs.fsinfo.{n}") for n in "rtmax rtpref rtmult wtmax wtpref wtmult dtpref".split()))
        + ((_u64, "nfs.fsinfo.maxfilesize"), (_time, "dtime"), (_properties, "nfs.fsinfo.properties")),
        (POST,),
    ),
    20: (
        (POST, *((_u32, f"nfs.pathconf.{n}") for n in "linkmax name_max no_trunc chown_restricted".split()))
        + ((_u32, "nfs.pathconf.case_insensitive"), (_u32, "nfs.pathconf.case_preserving")),
        (POST,),
    ),
}
# The call arguments after those rpcrdmatable reads (file handle, diropargs3, offset and count, stable)
ARGS = {7: ((_write_data, None),), 8: ((_createhow, "obj_attributes"),)}


def _run(x, out: list, steps, chunk) -> None:
    for step, arg in steps:
        step(x, out, chunk if step in (_read_data, _write_data) else arg)


def reply(x, proc: int, out: list, chunk=None) -> None:
    """The results of NFSv3 procedure `proc` into `out`: nfsstat3 (but for NULL), then RESULTS' steps;
    `chunk`: the bytes of the reply's write chunk (a READ's data)."""
    if proc == 0:
        return
    status = x.u32()
    out += [("nfs.status3", status), ("nfs.status", status)]
    _run(x, out, RESULTS.get(proc, ((), ()))[status != 0], chunk)


def call_tail(x, proc: int, out: list, chunk=None) -> None:
    """ARGS' steps of NFSv3 procedure `proc`; `chunk`: the bytes of the call's read list (a WRITE's data)."""
    _run(x, out, ARGS.get(proc, ()), chunk)

"""How tshark words the RPC-over-RDMA, ONC RPC and NFS items of `-V` (packet-rpcrdma.c, packet-rpc.c,
packet-nfs.c): program and procedure names, the items it generates (in brackets), an opaque's `contents`,
the ACCESS bits a call asks about, required and recommended NFSv4 attributes (RFC 7530 §5.1)."""

from dissectors.nfs3 import FTYPES, MODE_BITS
from dissectors.rpcrdmatable import NFS3_PROCS, NFS_PROGRAM
from dissectors.rpcrdmav2 import ERRORS, FLAGS, MSG_TYPES

# ONC RPC programs (RFC 5531 appendix, IANA's rpc-program-numbers) as packet-rpc.c names them
PROGRAMS = {100000: "Portmap", 100003: "NFS", 100005: "MOUNT", 100021: "NLM", 100024: "STAT", 100227: "NFSACL"}
# Items tshark generates, whatever frame they are in; and those it generates in one protocol only
GENERATED = {"nfs.fh.hash", "nfs.main_opcode", "nfs.procedure_v3", "nfs.procedure_v4", "rpc.repframe", "rpc.time"}
IN_NFS = {"rpc.programversion"}
IN_REPLY = {"rpc.program", "rpc.programversion", "rpc.procedure"}  # a reply's call, found or not
REQUIRED_ATTRS = set(range(12)) | {19}  # NFSv4 REQUIRED attributes; the others are RECOMMENDED
WHOLE = {
    "rpc.fill_bytes": lambda v: "fill bytes: opaque data",
    "rpc.auth.machinename": lambda v: f"contents: {v}",
    "nfs.name": lambda v: f"contents: {v}",
    "nfs.tag": lambda v: f"contents: {v or '<EMPTY>'}",
    "rpcordma.reads_count": lambda v: f"Read list (count: {v})",
    "rpcordma.writes_count": lambda v: f"Write list (count: {v})",
    "rpcordma.reply_count": lambda v: f"Reply chunk (count: {v})",
}


# Version 2's own items (dissectors.rpcrdmav2), which no Wireshark labels: ibwire's words for them
V2_LABELS = {
    "rpcordma.flags": "Flags",
    "rpcordma.inv_handle": "Remote Invalidation handle",
    "rpcordma.prop_count": "Transport properties",
    "rpcordma.prop_id": "Property id",
    "rpcordma.prop_length": "Length",
    "rpcordma.prop_value": "Value",
    "rpcordma.prop_data": "Value",
    "rpcordma.max_chunks": "Maximum chunks",
    "rpcordma.max_segments": "Maximum segments",
    "rpcordma.chunk_index": "Chunk index",
    "rpcordma.length_needed": "Length needed",
}
FLAG_BITS = {f"rpcordma.flags.{name}": (bit, name.upper()) for name, bit in FLAGS}

# NFSv3 results (dissectors.nfs3) as packet-nfs.c words them in -V
MODE_NAMES = {n: f"S_I{n[0].upper()}{n[1:].upper()}" for n in MODE_BITS[3:]}
MODE_NAMES.update(suid="S_ISUID", sgid="S_ISGID", sticky="S_ISVTX")
_YES = {"0": "No", "1": "Yes"}


def _mode(value: str) -> str:
    mode = int(value)
    on = [MODE_NAMES[n] for i, n in enumerate(MODE_BITS) if mode >> (11 - i) & 1]
    return ", ".join([f"Mode: 0{mode:o}"] + on)


NFS3_WORDS = {
    "nfs.fattr3.type": lambda v: f"Type: {FTYPES.get(int(v), 'Unknown')} ({v})",
    "nfs.mode3": _mode,
    "nfs.fattr3.fsid": lambda v: f"fsid: {v} ({int(v, 16)})",
    "nfs.read.eof": lambda v: f"EOF: {_YES.get(v, v)}",
    "nfs.write.committed": lambda v: (
        f"Committed: {('UNSTABLE', 'DATA_SYNC', 'FILE_SYNC', 'Unknown')[min(int(v), 3)]} ({v})"
    ),
    "nfs.verifier": lambda v: "Verifier: Opaque Data",
    "nfs.access_rights": lambda v: f"Access rights (of requested): {v}",
    "nfs.data": lambda v: "contents: <DATA>",
    **{
        f"nfs.{k}_follow": lambda v, k=k: f"{k}_follow: {'value follows' if v == '1' else 'no value'} ({v})"
        for k in ("attributes", "handle")
    },
    **{
        f"nfs.mode3.{n}": lambda v, n=n, i=i: f"{_bits(0x800 >> i, v == '1')} = {MODE_NAMES[n]}: {_YES.get(v, v)}"
        for i, n in enumerate(MODE_BITS)
    },
    **{
        f"nfs.pathconf.{n}": lambda v, n=n: f"{n}: {_YES.get(v, v)}"
        for n in ("no_trunc", "chown_restricted", "case_insensitive", "case_preserving")
    },
}
PLAIN = {f"nfs.fattr3.{n}": n for n in ("nlink", "uid", "gid", "size", "used", "fileid")}
PLAIN |= {
    "nfs.specdata1": "specdata1",
    "nfs.specdata2": "specdata2",
    "nfs.wcc_attr.size": "size",
    "nfs.count3": "count",
}
PLAIN |= {f"nfs.{t}": t for t in ("atime", "mtime", "ctime")}
PLAIN |= {f"nfs.{t}.sec": "seconds" for t in ("atime", "mtime", "ctime")}
PLAIN |= {f"nfs.{t}.nsec": "nano seconds" for t in ("atime", "mtime", "ctime")}
PLAIN |= {f"nfs.fsinfo.{n}": n for n in "rtmax rtpref rtmult wtmax wtpref wtmult dtpref maxfilesize".split()}
PLAIN |= {f"nfs.pathconf.{n}": n for n in ("linkmax", "name_max")}


def _bits(bit: int, on: bool) -> str:
    """A flag of a 32-bit word drawn as Wireshark draws one (`.... … ...1`)."""
    digits = ["." for _ in range(32)]
    digits[31 - (bit.bit_length() - 1)] = "1" if on else "0"
    return " ".join("".join(digits[i : i + 4]) for i in range(0, 32, 4))


def rdma_v2(key: str, value: str, text: str) -> str:
    """The -V line of a version 2 RPC-RDMA item: header type and error code by the draft's names, the
    flags drawn as bits, version 2's own items by V2_LABELS (`text`: the line as it stood)."""
    if key == "rpcordma.msg_type":
        return f"Message Type: {MSG_TYPES.get(int(value), 'Unknown')} ({value})"
    if key == "rpcordma.errcode":
        return f"Error code: {ERRORS.get(int(value), ('Unknown',))[0]} ({value})"
    if key in FLAG_BITS:
        bit, name = FLAG_BITS[key]
        on = value in ("1", "True")
        return f"{_bits(bit, on)} = RDMA2_F_{name}: {'Set' if on else 'Not set'}"
    return f"{V2_LABELS[key]}: {value}" if key in V2_LABELS else text


def procedure(prog: int, vers: int, proc: int) -> str:
    if prog == NFS_PROGRAM and vers == 3 and proc < len(NFS3_PROCS):
        return NFS3_PROCS[proc]
    if prog == NFS_PROGRAM and vers == 4 and proc < 2:
        return ("NULL", "COMPOUND")[proc]
    return f"proc-{proc}"


def line(key: str, value: str, text: str, layer: str, call) -> str:
    """The -V line of item `key` (`text` as the field's label words it) in protocol `layer`; `call`:
    (program, version, message type) of the frame's RPC message and its RPC-RDMA version."""
    prog, vers, msgtyp, rdma_vers = (int(v) if isinstance(v, int) else 0 for v in call)
    if layer == "rpcordma" and rdma_vers == 2:
        return rdma_v2(key, value, text)
    if key == "rpc.program":
        text = f"Program: {PROGRAMS.get(int(value), 'Unknown')} ({value})"
    elif key == "rpc.procedure":
        text = f"Procedure: {procedure(prog, vers, int(value))} ({value})"
    elif key.startswith("nfs.access_") and key not in ("nfs.access_check", "nfs.access_rights") and msgtyp == 0:
        text += "?"  # a call asks whether it is allowed
    elif key in NFS3_WORDS:
        text = NFS3_WORDS[key](value)
    elif key in PLAIN:
        text = f"{PLAIN[key]}: {value}"
    elif key == "nfs.attr" and int(value) not in REQUIRED_ATTRS:
        text = text.replace("reqd_attr", "reco_attr", 1)
    generated = (layer == "nfs" and key in IN_NFS) or (layer == "rpc" and msgtyp == 1 and key in IN_REPLY)
    return f"[{text}]" if generated and not text.startswith("[") else text


def _leaves(items: list):
    for key, value in items:
        if isinstance(value, list):
            yield from _leaves(value)
        else:
            yield key, value


def heading(name: str, items: list) -> str:
    """The title line of an `rpc` or `nfs` layer as packet-rpc.c and packet-nfs.c append to it: the RPC message
    type and XID; an NFSv3 GETATTR, READ or WRITE call's file handle hash, offset and length, its reply's
    length or error; an NFSv4 COMPOUND call's operations (other NFS messages: the protocol's name alone)."""
    from ibwire.report.packets.ws_labels import VALUES

    got = dict(_leaves(items))
    if name == "rpc":
        kind = {"0": "Call", "1": "Reply"}.get(got.get("rpc.msgtyp"))
        return f"Remote Procedure Call, Type:{kind} XID:{got.get('rpc.xid')}" if kind else "Remote Procedure Call"
    title = "Network File System"
    proc = VALUES["nfs.procedure_v3"].get(int(got.get("nfs.procedure_v3", -1)))
    fh = f"FH: {got.get('nfs.fh.hash')}"
    if "nfs.status3" in got and proc in ("GETATTR", "READ", "WRITE"):
        status = int(got["nfs.status3"])
        if status:
            err = VALUES["nfs.status3"].get(status, f"Unknown error: {status}")
            return f"{title}, {proc} Reply{'  ' if proc == 'GETATTR' else ' '}Error: {err}"
        if proc == "GETATTR":
            return f"{title}, GETATTR Reply"
        stable = VALUES["nfs.write.stable"].get(int(got.get("nfs.write.committed", -1)), "")
        return f"{title}, {proc} Reply Len: {got.get('nfs.count3')}" + (f" {stable}" if proc == "WRITE" else "")
    if proc == "GETATTR":
        return f"{title}, GETATTR Call {fh}"
    if proc in ("READ", "WRITE"):
        text = f"{title}, {proc} Call {fh} Offset: {got.get('nfs.offset3')} Len: {got.get('nfs.count3')}"
        stable = int(got.get("nfs.write.stable", -1))
        return text + (f" {VALUES['nfs.write.stable'].get(stable, f'Stable: {stable}')}" if proc == "WRITE" else "")
    ops = [VALUES["nfs.opcode"].get(int(v), v) for k, v in _pairs(items) if k == "nfs.opcode"]
    if got.get("nfs.procedure_v4") == "1" and "nfs.nfsstat4" not in got and ops:
        return f"{title}, Ops({len(ops)}): {', '.join(ops)}"
    return title


def _pairs(items: list):
    for key, value in items:
        yield key, value
        if isinstance(value, list):
            yield from _pairs(value)

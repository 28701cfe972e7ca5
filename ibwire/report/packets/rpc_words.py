"""How tshark words the RPC-over-RDMA, ONC RPC and NFS items of `-V` (packet-rpcrdma.c, packet-rpc.c,
packet-nfs.c): program and procedure names, the items it generates (in brackets), an opaque's `contents`,
the ACCESS bits a call asks about, required and recommended NFSv4 attributes (RFC 7530 §5.1)."""

from dissectors.rpcrdmatable import NFS3_PROCS, NFS_PROGRAM

# ONC RPC programs (RFC 5531 appendix, IANA's rpc-program-numbers) as packet-rpc.c names them
PROGRAMS = {100000: "Portmap", 100003: "NFS", 100005: "MOUNT", 100021: "NLM", 100024: "STAT", 100227: "NFSACL"}
# Items tshark generates, whatever frame they are in; and those it generates in one protocol only
GENERATED = {"nfs.fh.hash", "nfs.main_opcode", "nfs.procedure_v3", "nfs.procedure_v4", "rpc.reqframe", "rpc.time"}
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


def procedure(prog: int, vers: int, proc: int) -> str:
    if prog == NFS_PROGRAM and vers == 3 and proc < len(NFS3_PROCS):
        return NFS3_PROCS[proc]
    if prog == NFS_PROGRAM and vers == 4 and proc < 2:
        return ("NULL", "COMPOUND")[proc]
    return f"proc-{proc}"


def line(key: str, value: str, text: str, layer: str, call) -> str:
    """The -V line of item `key` (`text` as the field's label words it) in protocol `layer`; `call`:
    (program, version, message type) of the frame's RPC message."""
    prog, vers, msgtyp = (int(v) if isinstance(v, int) else 0 for v in call)
    if key == "rpc.program":
        text = f"Program: {PROGRAMS.get(int(value), 'Unknown')} ({value})"
    elif key == "rpc.procedure":
        text = f"Procedure: {procedure(prog, vers, int(value))} ({value})"
    elif key.startswith("nfs.access_") and key != "nfs.access_check":
        text += "?"  # a call asks whether it is allowed
    elif key == "nfs.attr" and int(value) not in REQUIRED_ATTRS:
        text = text.replace("reqd_attr", "reco_attr", 1)
    generated = (layer == "nfs" and key in IN_NFS) or (layer == "rpc" and msgtyp == 1 and key in IN_REPLY)
    return f"[{text}]" if generated and not text.startswith("[") else text

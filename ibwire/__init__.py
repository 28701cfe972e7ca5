"""ibwire: capture, decode, analyse and audit InfiniBand and RoCE traffic.

In Python (a notebook, a script), the bulk analyses are one call each:

    import ibwire
    packets = ibwire.read("x.pcap", filter="bth.p_key == 0x8001")   # pyarrow Table, .to_pandas()
    flows = ibwire.flows("x.pcap")          # ibwire.analyze.conversation.Flows (typed conversations)
    fabric = ibwire.fabric("ib.pcap")       # ibwire.notebook.Fabric (nodes, ports, links, SM, traps)
    io = ibwire.storage("nvmf.pcap")        # dict of pyarrow Tables: io["commands"], io["by_opcode"], …
    result = ibwire.audit("x.pcap", policy="partitions.conf", tenants="tenants.toml")

Everything is imported on first use, so `import ibwire` (and so the CLI's start-up) stays cheap.
"""

__version__ = "0.1.0"


def read(path, filter=None, icrc: bool = True):
    """Every packet of a capture as a pyarrow Table with the columns of `ibwire export` (one row per
    packet; `filter` is a display filter such as "bth.opcode == 0x11 && bth.p_key == 0x8001")."""
    from ibwire.notebook import read as _read

    return _read(path, filter, icrc)


def flows(path, filter=None, icrc: bool = True):
    """The conversations of a capture with RC transport analysis, as typed objects (see `ibwire flows`)."""
    from ibwire.notebook import flows as _flows

    return _flows(path, filter, icrc)


def storage(path, decode_as=()):
    """The storage view of a capture (NVMe-oF, NFS over RDMA, iSER, SMB Direct commands with latency, and
    per opcode IOPS, throughput and latency percentiles) as pyarrow Tables, one per section of
    `ibwire stats --storage --format json`; `decode_as` as its -d: "nvme-rdma", "rpcordma", "iser"."""
    from ibwire.notebook import storage as _storage

    return _storage(path, decode_as)


def fabric(path):
    """The subnet rebuilt from a native-IB capture's management traffic, as typed objects."""
    from ibwire.notebook import fabric as _fabric

    return _fabric(path)


def audit(*captures, policy, tenants=None, state=None, allow_both_pkeys: bool = False, fail_on: str = "breach"):
    """The P_Key isolation audit of one incident's captures: verdict, findings, tenant matrix."""
    from ibwire.notebook import audit as _audit

    return _audit(captures, policy, tenants, state, allow_both_pkeys, fail_on)


def _keep_api():
    """`ibwire.audit` is also a subpackage; importing it must not replace the function above on the
    package (the submodules stay reachable through sys.modules and `from`)."""
    import sys
    import types

    class _Package(types.ModuleType):
        def __setattr__(self, name, value):
            if name == "audit" and isinstance(value, types.ModuleType):
                return
            super().__setattr__(name, value)

    sys.modules[__name__].__class__ = _Package


_keep_api()

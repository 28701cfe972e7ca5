"""The Python API behind `ibwire.read/flows/fabric/audit`: the CLI's analyses returned as a pyarrow Table
or as typed objects (dataclasses) instead of printed."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ibwire.errors import UserError


def _need_file(path) -> str:
    if not Path(path).is_file():
        raise UserError(f"{path} does not exist or is not a file; give the path of a capture")
    return str(path)


def read(path, filter: Optional[str] = None, icrc: bool = True):
    """Every packet (or those `filter` keeps) as a pyarrow Table with arrow.record_schema()'s columns."""
    import pyarrow as pa

    from ibwire.analyze.arrow import record_schema, record_table
    from ibwire.analyze.packets import CaptureAnalysis
    from ibwire.decode.record_filter import compile_batch_filter
    from ibwire.decode.scan import scan

    mask = compile_batch_filter(filter) if filter else None
    parts = []
    s = scan(_need_file(path), icrc=icrc)
    s.fill = CaptureAnalysis(path, icrc).fill  # the bth_analysis_* columns, as export writes them
    for rec in s:
        if mask is not None:
            rec = rec[mask(rec)]
        if len(rec):
            parts.append(record_table(rec))
    if not parts:
        return record_schema().empty_table()
    return pa.concat_tables(parts, promote_options="permissive").unify_dictionaries().combine_chunks()


def flows(path, filter: Optional[str] = None, icrc: bool = True):
    from ibwire.analyze.conversation import Conversation, Flows
    from ibwire.analyze.flows import analyse
    from ibwire.decode.record_filter import compile_batch_filter

    mask = compile_batch_filter(filter) if filter else None
    res = analyse(_need_file(path), icrc, mask)
    rows = res["conversations"]
    return Flows([Conversation.from_row(r) for r in rows], list(res["problems"]), rows)


def _make(cls, d: Optional[dict]):
    """A dataclass from the keys of `d` it has fields for (None stays None)."""
    if d is None:
        return None
    return cls(**{f.name: d.get(f.name) for f in fields(cls)})


@dataclass(frozen=True)
class Node:
    guid: int
    type: Optional[str]
    description: Optional[str]
    system_image_guid: Optional[int]
    num_ports: Optional[int]
    device_id: Optional[int]
    vendor_id: Optional[int]


@dataclass(frozen=True)
class Port:
    guid: Optional[int]
    node_guid: int
    port_num: int
    lid: Optional[int]
    lmc: Optional[int]
    state: Optional[str]
    master_sm_lid: Optional[int]
    partition_enforcement: Optional[Dict[str, int]]
    violations: Optional[Dict[str, int]]
    pkeys: List[int]
    pkey_table: List[int]
    pkeys_last: Optional[str]
    pkeys_frame: Optional[int]


@dataclass(frozen=True)
class SubnetManager:
    guid: int
    lid: Optional[int]
    priority: int
    state: str
    actcount: int
    sm_key: int
    frame: int


@dataclass(frozen=True)
class Link:
    a_node_guid: int
    a_port: int
    b_node_guid: int
    b_port: int
    active: Optional[str] = None
    active_gbps: Optional[float] = None
    best_supported: Optional[str] = None
    best_supported_gbps: Optional[float] = None
    best_enabled: Optional[str] = None
    best_enabled_gbps: Optional[float] = None
    below_supported: Optional[bool] = None
    below_enabled: Optional[bool] = None


@dataclass(frozen=True)
class Trap:
    frame: int
    time: float
    slid: int
    dlid: int
    generic: bool
    type: int
    number: Optional[int]
    issuer_lid: int
    details: Dict[str, object]


@dataclass(frozen=True)
class Fabric:
    """The subnet as a capture's SMPs show it (the schema of `ibwire fabric --format json`)."""

    capture: str
    mads: int
    smps: int
    nodes: List[Node]
    ports: List[Port]
    master_sm: Optional[SubnetManager]
    master_sm_lid: Optional[int]
    sms_seen: List[SubnetManager]
    links: List[Link]
    traps: List[Trap]


def fabric(path) -> Fabric:
    from ibwire.analyze.fabric import fabric_view

    v = fabric_view(_need_file(path))
    links = [
        Link(
            a_node_guid=lk["a"]["node_guid"],
            a_port=lk["a"]["port_num"],
            b_node_guid=lk["b"]["node_guid"],
            b_port=lk["b"]["port_num"],
            **{k: x for k, x in lk.items() if k not in ("a", "b")},
        )
        for lk in v["links"]
    ]
    return Fabric(
        v["capture"],
        v["mads"],
        v["smps"],
        [_make(Node, n) for n in v["nodes"]],
        [_make(Port, p) for p in v["ports"]],
        _make(SubnetManager, v["sm"]["master"]),
        v["sm"]["master_lid"],
        [_make(SubnetManager, s) for s in v["sm"]["seen"]],
        links,
        [_make(Trap, t) for t in v["traps"]],
    )


STORAGE_DECODE_AS = ("nvme-rdma", "rpcordma", "iser")


def storage(path, decode_as=()) -> dict:
    """`ibwire stats --storage` as pyarrow Tables, one per section of its JSON (commands, by_opcode, by_queue,
    errors, rpc_calls, …); `commands` has the Parquet export's column types.  `decode_as`: any of
    STORAGE_DECODE_AS, as `-d`."""
    from ibwire.analyze.storage import analyse, commands_table, section_table

    unknown = set(decode_as) - set(STORAGE_DECODE_AS)
    if unknown:
        raise UserError(f"decode_as takes {', '.join(STORAGE_DECODE_AS)}, not {', '.join(sorted(unknown))}")
    res = analyse(_need_file(path), *(name in decode_as for name in STORAGE_DECODE_AS))
    out = {"commands": commands_table(res["commands"])}
    for key, rows in res.items():
        if key not in out and isinstance(rows, Sequence) and not isinstance(rows, str) and key != "problems":
            out[key] = section_table(rows)
    return out


@dataclass(frozen=True)
class MatrixCell:
    """Traffic from one tenant to another and the worst finding about that pair."""

    src: str
    dst: str
    packets: int
    bytes: int
    worst: Optional[str]


@dataclass(frozen=True)
class AuditResult:
    """An isolation audit's outcome (the JSON of `ibwire audit --format json`, typed)."""

    verdict: str
    fail_on: str
    worst: Optional[str]
    packets: int
    frames: int
    tenants: List[str]
    matrix: List[MatrixCell]
    findings: list  # ibwire.audit.findings.Finding
    unnamed_endpoints: Dict[str, int]
    policy_warnings: List[str]

    @property
    def passed(self) -> bool:
        """A PASS on complete evidence only: "PASS (evidence incomplete: …)" has not passed."""
        return self.verdict == "PASS"


def audit(
    captures, policy, tenants=None, state=None, allow_both_pkeys: bool = False, fail_on: str = "breach"
) -> AuditResult:
    from ibwire.audit.findings import SEVERITIES
    from ibwire.audit.inputs import audit_captures, load_state
    from ibwire.audit.policy import load_policy
    from ibwire.audit.tenants import load_tenants
    from ibwire.report.audit_report import as_dict

    if fail_on not in SEVERITIES:
        raise UserError(f"fail_on={fail_on!r}: choose one of {', '.join(SEVERITIES)}")
    paths = [_need_file(p) for p in captures]
    res = audit_captures(
        paths,
        load_policy(str(policy), allow_both_pkeys),
        load_tenants(str(tenants)) if tenants else None,
        load_state(state),
    )
    d = as_dict(res, fail_on)
    return AuditResult(
        d["verdict"],
        fail_on,
        d["worst"],
        d["packets"],
        d["frames"],
        d["tenants"],
        [MatrixCell(m["from"], m["to"], m["packets"], m["bytes"], m["worst"]) for m in d["matrix"]],
        list(res.findings),
        dict(d["unnamed_endpoints"]),
        list(d.get("policy_warnings", [])),
    )

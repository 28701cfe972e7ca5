"""Typed results of `ibwire flows` for Python users (`ibwire.flows(path)`): one `Conversation` per QP
pair with RC transport counters, in the units and types of the exported Parquet table (arrow.FLOW_SCHEMA)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Dict, List, Optional


@dataclass(frozen=True)
class Latency:
    """Percentiles of the first latency samples of a conversation, in microseconds."""

    n: int
    p50: float
    p90: float
    p99: float
    max: float


@dataclass(frozen=True)
class Conversation:
    """One RC/UC/UD/XRC conversation (both directions).  RC-only counters are None on other transports."""

    conversation: int
    transport: str
    a: str
    b: str
    qpn_a: Optional[int]
    qpn_b: Optional[int]
    p_keys: List[int]
    paired_by: str
    packets_a_to_b: int
    packets_b_to_a: int
    bytes_a_to_b: int
    bytes_b_to_a: int
    payload_bytes: int
    first_time_ns: Optional[int]
    duration_s: float
    goodput_bps: Optional[float]
    messages: Dict[str, int]
    message_bytes: Dict[str, int]
    one_sided: int
    two_sided: int
    cnp_received_a: int
    cnp_received_b: int
    ecn_ce: int
    psn_gaps: Optional[int] = None
    drops: Optional[int] = None
    not_captured: Optional[int] = None
    retransmissions: Optional[int] = None
    out_of_order: Optional[int] = None
    length_mismatch: Optional[int] = None
    bad_icrc: Optional[int] = None
    not_analysed: Optional[str] = None  # why the sequencer followed none of its packets
    acks: Optional[int] = None
    naks: Dict[str, int] = field(default_factory=dict)
    rnr_naks: Optional[int] = None
    rnr_timer_ms: Dict[float, int] = field(default_factory=dict)
    ack_coalescing: Optional[float] = None
    max_outstanding: Optional[int] = None
    reads_completed: Optional[int] = None
    unmatched_read_responses: Optional[int] = None
    unacknowledged_at_end: Optional[int] = None
    read_latency_us: Optional[Latency] = None
    ack_latency_us: Optional[Latency] = None
    retries_a: Optional[dict] = None  # retransmission forensics of a's requests (analyze.retries)
    retries_b: Optional[dict] = None

    @property
    def lossy(self) -> bool:
        """Whether the transport lost or resent anything (drops, retransmissions, NAKs, bad ICRCs)."""
        return bool(self.drops or self.retransmissions or self.naks or self.bad_icrc)

    @classmethod
    def from_row(cls, r: dict) -> "Conversation":
        """From a row of flows.analyse()."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in r.items() if k in names}
        kw["qpn_a"] = None if r.get("qpn_a") is None else int(r["qpn_a"], 16)
        kw["qpn_b"] = None if r.get("qpn_b") is None else int(r["qpn_b"], 16)
        kw["p_keys"] = [int(p, 16) for p in r["p_key"].split(",") if p]
        kw["first_time_ns"] = r.get("first_time_ns")
        kw["naks"] = dict(r.get("naks") or {})
        kw["rnr_timer_ms"] = {float(k): v for k, v in (r.get("rnr_timer_ms") or {}).items()}
        for k in ("read_latency_us", "ack_latency_us"):
            kw[k] = Latency(**r[k]) if r.get(k) else None
        return cls(**kw)


@dataclass(frozen=True)
class Flows:
    """The conversations of a capture (largest first) and the file damage met while reading it."""

    conversations: List[Conversation]
    problems: List[str]
    _rows: List[dict] = field(repr=False, compare=False, default_factory=list)

    def __len__(self) -> int:
        return len(self.conversations)

    def __iter__(self):
        return iter(self.conversations)

    def to_arrow(self):
        """The conversation table as a pyarrow Table (the columns of `ibwire export --flows`)."""
        from ibwire.analyze.arrow import flow_table

        return flow_table(self._rows)

    def to_pandas(self):
        return self.to_arrow().to_pandas()

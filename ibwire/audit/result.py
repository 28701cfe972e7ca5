"""An audit's outcome: findings, the tenant × tenant traffic matrix and the pass/fail verdict."""
from __future__ import annotations

from typing import Optional

from .findings import severity_rank
from .identity import NO_TENANT
from .state import FabricState


class Result:
    def __init__(self, audit):
        self.audit = audit                # the engine.Audit that produced it (counts, flows, mappings)
        self.findings: list = []
        self.matrix: dict = {}            # (src tenant, dst tenant) -> [packets, bytes]
        self.ports: Optional[FabricState] = None

    def add_cell(self, a: str, b: str, packets: int, nbytes: int) -> None:
        cell = self.matrix.setdefault((a, b), [0, 0])
        cell[0] += packets
        cell[1] += nbytes

    def tenant_names(self) -> list:
        names = list(self.audit.tenants.names)
        if any(NO_TENANT in k for k in self.matrix):
            names.append(NO_TENANT)
        return names

    def cell(self, a: str, b: str):
        """(packets, bytes, worst severity of the findings about this pair or None)."""
        packets, nbytes = self.matrix.get((a, b), [0, 0])
        worst = None
        for f in self.findings:
            if f.tenants and (f.tenants == (a, b)):
                if worst is None or severity_rank(f.severity) > severity_rank(worst):
                    worst = f.severity
        return packets, nbytes, worst

    def worst(self) -> Optional[str]:
        return max((f.severity for f in self.findings), key=severity_rank, default=None)

    def verdict(self, fail_on: str) -> str:
        w = self.worst()
        if w is not None and severity_rank(w) >= severity_rank(fail_on):
            return "FAIL"
        return "PASS"

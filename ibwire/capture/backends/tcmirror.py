"""`tc-mirror` backend: in switchdev mode, mirror a VF's representor to a monitor netdev and capture there.

What the VF sends arrives on its representor's ingress; what it receives arrives on the uplink (or another
VF's representor) with the VF's MAC as destination.  Rules: `tc filter add dev REP ingress ... action
mirred egress mirror dev MON` (Linux tc-mirred(8)), classifier probed flower -> matchall -> u32; on a real
NIC (a netdev with a PCI device) rules carry skip_sw and must report in_hw (mlx5 switchdev.rst).
Each rule ends in `continue` (tc-actions(8) control) so the next filter still sees the packet: captures of
other VFs of the same PF mirror the same packets through their own rules.  Rules, monitors and the qdisc
carry ibwire's marks (ibwire.capture.marks).  The packets are read from the monitor by dumpcap.
Each change is journaled before it is made, and made so that it carries its mark from its first moment: the
monitor is created and given its alias in one `ip -batch`; a clsact qdisc ibwire adds comes in one `tc -force
-batch` with the marked rule that flags it as ibwire's, each classifier tried in turn at one pref until one takes
(a later kind at a taken pref is refused by the kernel), so a capture killed at any point leaves nothing that
neither its journal nor a mark names.
"""

import os
import subprocess
from typing import List, Optional, Tuple

from ibwire.capture import marks
from ibwire.capture.hostcmds import run_json
from ibwire.capture.journal import StateLock
from ibwire.errors import UserError


def _batch(tool: str, lines: List[List[str]], force: bool = False) -> Tuple[int, str]:
    """Run commands in one `tc -batch -` or `ip -batch -` (with force: every line, whatever fails): once
    started, they finish even if ibwire is killed."""
    text = "".join(" ".join(f'"{a}"' if " " in a else a for a in line) + "\n" for line in lines)
    try:
        r = subprocess.run(
            [tool] + ["-force"] * force + ["-batch", "-"], input=text, capture_output=True, text=True, timeout=15
        )
    except FileNotFoundError:
        raise UserError(f"{tool} (iproute2) is not installed; install iproute2") from None
    return r.returncode, (r.stderr or r.stdout).strip()


def is_hardware(dev: str) -> bool:
    return os.path.exists(f"/sys/class/net/{dev}/device")


def _has_clsact(dev: str) -> bool:
    return any(q.get("kind") == "clsact" for q in run_json(["tc", "-j", "qdisc", "show", "dev", dev]) or [])


def _qdisc_is_ours(dev: str) -> bool:
    """The clsact on dev was added by an ibwire capture (one of its marked rules says so)."""
    return any(f.flags & marks.QDISC_IS_OURS for f in marks.marked_filters(None, dev))


def _free_pref(dev: str) -> int:
    used = {f.get("pref") for f in run_json(["tc", "-j", "filter", "show", "dev", dev, "ingress"]) or []}
    p = marks.PREF_BASE
    while p in used:
        p += 1
    return p


def _mac_u32(mac: str) -> List[str]:
    h = mac.replace(":", "").lower()
    return [
        "match",
        "u16",
        "0x" + h[:4],
        "0xffff",
        "at",
        "-14",
        "match",
        "u32",
        "0x" + h[4:],
        "0xffffffff",
        "at",
        "-12",
    ]


def classifier_args(kind: str, dst_mac: Optional[str], hw: bool) -> Optional[List[str]]:
    """tc classifier arguments for 'everything' (dst_mac None) or 'to this MAC'; None if the kind cannot."""
    flags = ["skip_sw"] if hw else []
    if kind == "flower":
        return ["flower"] + flags + (["dst_mac", dst_mac] if dst_mac else [])
    if kind == "matchall":
        return None if dst_mac else ["matchall"] + flags
    if kind == "u32":
        return ["u32"] + flags + (_mac_u32(dst_mac) if dst_mac else ["match", "u32", "0", "0"])
    raise ValueError(kind)


class TcMirror:
    name = "tc-mirror"

    def __init__(
        self,
        representor: str,
        mac: Optional[str],
        peers: List[str],
        monitor: Optional[str] = None,
        capture_dev: Optional[str] = None,
    ):
        self.rep, self.mac, self.peers = representor, mac, peers
        self.monitor, self.capture_dev = monitor, capture_dev or monitor
        self.classifiers = {}
        self.qdisc_flags = {}
        self.notes: List[str] = []

    def _make_monitor(self, journal):
        n = 0
        while os.path.exists(f"/sys/class/net/{marks.MONITOR}{n}a"):
            n += 1
        a, b = f"{marks.MONITOR}{n}a", f"{marks.MONITOR}{n}b"
        journal.record(f"monitor veth pair {a}/{b}", ["ip", "link", "del", "dev", a])
        rc, err = _batch(
            "ip",
            [
                ["link", "add", "name", a, "type", "veth", "peer", "name", b],
                ["link", "set", "dev", a, "alias", marks.alias()],
            ],
        )
        if rc:
            raise UserError(f"cannot create the monitor interface {a}: {err.splitlines()[0] if err else rc}")
        for dev in (a, b):
            try:
                with open(f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6", "w") as f:
                    f.write("1")
            except OSError:
                pass
            subprocess.run(["ip", "link", "set", "dev", dev, "up"], capture_output=True)
        self.monitor, self.capture_dev = a, b

    def _ensure_clsact(self, dev: str, journal) -> bool:
        """Journal the clsact qdisc of dev (an ibwire clsact is removed by the last capture using it, a foreign
        one never); True when there is none yet and the first rule must add it."""
        present = _has_clsact(dev)
        if present and not _qdisc_is_ours(dev):
            self.qdisc_flags[dev] = 0
            return False
        self.qdisc_flags[dev] = marks.QDISC_IS_OURS
        journal.record(
            f"clsact qdisc on {dev} once no capture uses it",
            ["tc", "qdisc", "del", "dev", dev, "clsact"],
            if_no_filters=dev,
        )
        return not present

    def _add_rule(self, dev: str, dst_mac: Optional[str], journal, add_qdisc: bool = False):
        hw = is_hardware(dev)
        pref = _free_pref(dev)
        key = "mac" if dst_mac else "all"
        order = [self.classifiers[key]] if key in self.classifiers else ["flower", "matchall", "u32"]
        tries = [(kind, cls) for kind in order if (cls := classifier_args(kind, dst_mac, hw)) is not None]
        journal.record(
            f"mirror rule on {dev} ingress pref {pref}",
            ["tc", "filter", "del", "dev", dev, "ingress", "pref", str(pref)],
        )
        rc, err = _batch(
            "tc",
            [["qdisc", "add", "dev", dev, "clsact"]] * add_qdisc
            + [
                ["filter", "add", "dev", dev, "ingress", "pref", str(pref), "protocol", "all"]
                + cls
                + [
                    "action",
                    "mirred",
                    "egress",
                    "mirror",
                    "dev",
                    self.monitor,
                    "continue",
                    "cookie",
                    marks.cookie(self.qdisc_flags.get(dev, 0)),
                ]
                for _, cls in tries
            ],
            force=True,
        )
        errors = [ln for ln in err.splitlines() if not ln.startswith(("Command failed", "We have an error"))]
        if add_qdisc and not _has_clsact(dev):
            raise UserError(f"cannot add a clsact qdisc to {dev}: {errors[0] if errors else rc}")
        kind = next(
            (
                f.get("kind")
                for f in run_json(["tc", "-j", "filter", "show", "dev", dev, "ingress", "pref", str(pref)]) or []
            ),
            None,
        )
        if kind is None:
            raise UserError(
                f"no tc classifier could mirror {dev} (tried {', '.join(k for k, _ in tries)}: "
                f"{'; '.join(dict.fromkeys(errors)) or rc})"
            )
        self.classifiers[key] = kind
        if hw and not self._in_hw(dev, pref):
            raise UserError(
                f"the mirror rule on {dev} is not offloaded (not in_hw); check "
                f"`ethtool -k {dev} | grep hw-tc-offload` and the eswitch mode"
            )

    @staticmethod
    def _in_hw(dev: str, pref: int) -> bool:
        for f in run_json(["tc", "-j", "filter", "show", "dev", dev, "ingress", "pref", str(pref)]) or []:
            if (f.get("options") or {}).get("in_hw"):
                return True
        return False

    def arm(self, journal):
        if not os.path.exists(f"/sys/class/net/{self.rep}"):
            raise UserError(f"representor {self.rep} does not exist in this network namespace")
        with StateLock():
            if not self.monitor:
                self._make_monitor(journal)
            self._add_rule(self.rep, None, journal, self._ensure_clsact(self.rep, journal))
            if self.mac:
                for peer in self.peers:
                    self._add_rule(peer, self.mac, journal, self._ensure_clsact(peer, journal))
        self.notes.append(
            f"mirroring {self.rep} ingress"
            + (f" and traffic to {self.mac} on {', '.join(self.peers)}" if self.mac and self.peers else "")
            + f" to {self.monitor} with "
            + "/".join(sorted(set(self.classifiers.values())))
            + f"; capturing on {self.capture_dev}"
        )

    def vanished(self):
        """A sentence if the representor went away (its VF was removed) during the capture, else None."""
        if not os.path.exists(f"/sys/class/net/{self.rep}"):
            return f"representor {self.rep} vanished during the capture (its VF was removed); the capture stopped"
        return None

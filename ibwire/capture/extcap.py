"""Wireshark's extcap interface for ibwire: its targets as capture interfaces of Wireshark and tshark.

Protocol (Wireshark doc/extcap.adoc, extcap_example.py): `--extcap-interfaces` lists `extcap {version}` and one
`interface {value}{display}` line each; `--extcap-dlts --extcap-interface I` the link type; `--extcap-config`
the options; `--capture --extcap-interface I --fifo F [--extcap-capture-filter BPF]` writes pcap into F until
Wireshark stops it (SIGTERM on Unix).  A capture here is `ibwire capture` writing to the FIFO, inside the lab's
PF namespace for lab VFs, so arming, journal and disarm are those of every capture.
"""

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from dissectors.numbers import LINKTYPE_ERF, LINKTYPE_ETHERNET
from ibwire.capture import sysfs
from ibwire.capture.target import lab_shape, labs
from ibwire.errors import UserError
from ibwire.files.outfile import output_file

VERSION = "1.0"


@dataclass
class ExtcapTarget:
    value: str
    display: str
    args: List[str]  # `ibwire capture` arguments selecting it
    netns: Optional[str] = None  # run the capture in this network namespace
    dlt: int = 1
    dlt_name: str = "EN10MB"


def targets() -> List[ExtcapTarget]:
    """Every RDMA port and VF of this host, and every VF of the ibwire labs described in the run directory."""
    out = []
    for d in sysfs.list_devices():
        for p in d.ports:
            ib = p.is_ib
            out.append(
                ExtcapTarget(
                    f"ibwire-{d.name}-p{p.num}",
                    f"ibwire: {d.name} port {p.num} ({p.link_layer})",
                    ["--pf", d.name, "--port", str(p.num)],
                    None,
                    LINKTYPE_ERF if ib else LINKTYPE_ETHERNET,
                    "ERF" if ib else "EN10MB",
                )
            )
        for v in d.vfs:
            ib = bool(d.ports) and d.ports[0].is_ib
            out.append(
                ExtcapTarget(
                    f"ibwire-{d.name}-vf{v.index}",
                    f"ibwire: VF {v.index} of {d.name}",
                    ["--pf", d.name, "--vf", str(v.index)],
                    None,
                    LINKTYPE_ERF if ib else LINKTYPE_ETHERNET,
                    "ERF" if ib else "EN10MB",
                )
            )
    try:
        found = labs()
    except (UserError, OSError):
        found = []
    for _, lab in found:
        if lab_shape(lab) and isinstance(lab.get("pf_netns"), str):
            name, ns = lab["name"], lab["pf_netns"]
            out += [
                ExtcapTarget(
                    f"ibwire-{name}-vf{v['index']}",
                    f"ibwire: VF {v['index']} of lab {name}",
                    ["--vf", str(v["index"])],
                    ns,
                )
                for v in lab["vfs"]
            ]
    return out


def find(value: Optional[str]) -> ExtcapTarget:
    for t in targets():
        if t.value == value:
            return t
    raise UserError(f"no ibwire capture target {value!r}; `ibwire extcap --extcap-interfaces` lists them")


def interfaces() -> str:
    lines = [f"extcap {{version={VERSION}}}"]
    lines += [f"interface {{value={t.value}}}{{display={t.display}}}" for t in targets()]
    return "\n".join(lines)


def dlts(value: Optional[str]) -> str:
    t = find(value)
    return f"dlt {{number={t.dlt}}}{{name={t.dlt_name}}}{{display={t.display}}}"


def config() -> str:
    return "\n".join(
        [
            "arg {number=0}{call=--all}{display=Every packet of the port}{tooltip=Keep every packet of the port, "
            "not only the VF's}{type=boolflag}",
            "arg {number=1}{call=--buffer-size}{display=Kernel buffer (MiB)}{type=integer}{range=1,4096}{default=128}",
        ]
    )


def capture(value: Optional[str], fifo: Optional[str], bpf: Optional[str], extra: List[str]) -> int:
    """Run `ibwire capture` for the target into the FIFO until it ends or Wireshark stops us."""
    if not fifo:
        raise UserError("--capture needs --fifo PATH")
    t = find(value)
    cmd = [sys.executable, "-c", "from ibwire.cli import main; main()", "capture"] + t.args + extra + ["-w", "-"]
    if bpf:
        cmd += ["-f", bpf]
    if t.netns:
        cmd = ["ip", "netns", "exec", t.netns] + cmd
    with open(fifo, "wb") as out:  # Wireshark shows anything on stderr as an error: only failures go there
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, start_new_session=True)
    err = []
    reader = threading.Thread(target=lambda: err.append(child.stderr.read()), daemon=True)
    reader.start()

    def stop(_signum, _frame):
        if child.poll() is None:
            child.send_signal(signal.SIGINT)  # the capture stops as on Ctrl-C: it disarms and closes the file

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, stop)
    rc = child.wait()
    reader.join(5)
    if rc not in (0, 130):
        sys.stderr.write(b"".join(err).decode(errors="replace"))
        return rc
    return 0


def personal_folder() -> Path:
    """Wireshark's personal extcap folder: `tshark -G folders` names it (4.2+), else <personal config>/extcap."""
    try:
        text = subprocess.run(["tshark", "-G", "folders"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    m = re.search(r"^Personal Extcap path:\s*(.+)$", text, re.M)
    if m:
        return Path(m.group(1).strip())
    m = re.search(r"^Personal configuration:\s*(.+)$", text, re.M)
    base = (
        Path(m.group(1).strip())
        if m
        else Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "wireshark"
    )
    return base / "extcap"


def install() -> Path:
    """Write the launcher `ibwire-extcap` into the personal extcap folder (through ibwire.files.outfile: a part
    file nobody can plant, renamed into place); returns its path."""
    folder = personal_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the extcap folder {folder} ({e.strerror})") from None
    path = folder / "ibwire-extcap"
    with output_file(path, "w", perms=0o755) as f:
        f.write(
            f"#!/bin/sh\n# Wireshark extcap launcher for ibwire (`ibwire extcap --install` wrote it)\n"
            f"exec {shlex.quote(sys.executable)} -c 'from ibwire.cli import main; main()' extcap \"$@\"\n"
        )
    return path

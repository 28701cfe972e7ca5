"""Run real opensm (Debian package) on an ibsim fabric (net.topo) for the audit tests.

`fabric(conf)` starts ibsim on its own socket, opensm under libumad2sim with `-P conf`, waits for
SUBNET UP and yields the environment the infiniband-diags tools need to reach that fabric.
A first line `# opensm: --allow_both_pkeys` in conf runs opensm with that option (an opensm.conf option).
"""

import contextlib
import itertools
import os
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
UMAD2SIM = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
TOPO = HERE / "net.topo"
_ids = itertools.count()

# port GUIDs of net.topo: the four HCAs, then the two switches (port 0); opensm runs on Switch1
HCAS = (0x100001, 0x100004, 0x100007, 0x10000A)
SWITCHES = (0x200000, 0x200001)


def _wait_for(path: Path, text: str, timeout: float) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return False


def opensm_options(conf: Path) -> list:
    first = conf.read_bytes().split(b"\n", 1)[0]
    return ["--allow_both_pkeys"] if b"opensm: --allow_both_pkeys" in first else []


@contextlib.contextmanager
def fabric(conf: Path, tmp: Path, topo: Path = TOPO):
    """Yield (env, opensm log path) with opensm having brought the subnet up from `conf`."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ, IBSIM_SOCKNAME=f"ibwaud{os.getpid()}x{next(_ids)}", OSM_TMP_DIR=str(tmp), OSM_CACHE_DIR=str(tmp)
    )
    procs = []
    try:
        sim_log = tmp / "ibsim.log"
        with open(sim_log, "wb") as out:
            procs.append(
                subprocess.Popen(
                    ["ibsim", "-s", "-n", str(topo)],
                    env=env,
                    cwd=tmp,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        assert _wait_for(Path("/proc/net/unix"), f"@{env['IBSIM_SOCKNAME']}:ctl@", 20), "ibsim did not start"
        env["LD_PRELOAD"] = UMAD2SIM
        log = tmp / "osm.log"
        log.unlink(missing_ok=True)
        cmd = ["opensm", "-P", str(conf), "-f", str(log), "-s", "0", "-d2"]
        if opensm_options(conf):
            cfg = tmp / "opensm.conf"
            cfg.write_text("allow_both_pkeys TRUE\n")
            cmd += ["-F", str(cfg)]
        procs.append(subprocess.Popen(cmd, env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        assert _wait_for(log, "SUBNET UP", 30), f"opensm did not bring the subnet up ({log})"
        yield env, log
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@contextlib.contextmanager
def environ(env: dict):
    """Run in-process code (the audit's --state live) against one fabric."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)

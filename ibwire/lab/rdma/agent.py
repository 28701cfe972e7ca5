"""The guest side of ibwire's RDMA lab: PID 1 after switch_root, standard library only (runs with -I -S).

It configures the guest from /ibwlab/lab.json (its index is `ibwg=N` on the kernel command line): IPv6 off,
rdma_rxe bound to the virtual NIC (`rdma link add rxe0 type rxe netdev NIC`), the tenant's VLAN device and
address, permanent neighbours for the guests of its VLAN.  It then writes /ibwlab/gN/ready.json and serves
commands from the mailbox /ibwlab/gN (a 9p share with the host, cache=none):

    req/ID.json   {"argv": [...], "timeout": s}  written by the host (renamed into place)
    req/ID.kill   the host asks to stop job ID (SIGTERM to its process group, SIGKILL 2 s later)
    out/ID.1 .2   the job's stdout and stderr, written as it runs
    done/ID.json  {"rc": n}, renamed into place when the job ended (128+signal when killed)
"""

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time

ROOT = "/ibwlab"
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "TERM": "dumb",
    "LANG": "C.UTF-8",
}
MODULES = ["rdma_rxe", "ib_uverbs", "rdma_ucm"]  # 8021q and sch_netem load when a VLAN or netem asks


def log(msg):
    print(f"ibwire-agent t={uptime():.2f} {msg}", flush=True)


def uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def sh(*argv, check=True):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
    if check and r.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {r.stdout.strip()}")
    return r.stdout


def write_atomic(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.rename(tmp, path)


def mounts():
    """/run, /dev/pts, /dev/shm, configfs with mount(2) itself: each program started costs tens of ms under TCG."""
    libc = ctypes.CDLL(None, use_errno=True)
    for fs, target, opts in (
        ("tmpfs", "/run", "mode=755"),
        ("devpts", "/dev/pts", "gid=5,mode=620"),
        ("tmpfs", "/dev/shm", "mode=1777"),
        ("configfs", "/sys/kernel/config", ""),
    ):
        try:
            os.makedirs(target, exist_ok=True)
        except OSError:  # configfs appears only once its module is in
            continue
        libc.mount(fs.encode(), target.encode(), fs.encode(), 0, opts.encode() or None)


def nic_named(mac: str) -> str:
    for _ in range(100):
        for n in os.listdir("/sys/class/net"):
            try:
                with open(f"/sys/class/net/{n}/address") as f:
                    if f.read().strip() == mac:
                        return n
            except OSError:
                pass
        time.sleep(0.05)
    raise RuntimeError(f"no NIC with MAC {mac}")


def gid_index(ip: str) -> int:
    want = "0000:0000:0000:0000:0000:ffff:" + "%02x%02x:%02x%02x" % tuple(int(x) for x in ip.split("."))
    base = "/sys/class/infiniband/rxe0/ports/1/gids"
    for _ in range(200):
        for g in sorted(os.listdir(base), key=int) if os.path.isdir(base) else []:
            try:
                with open(f"{base}/{g}") as f:
                    if f.read().strip() == want:
                        return int(g)
            except OSError:
                pass
        time.sleep(0.05)
    raise RuntimeError(f"rxe0 has no GID for {ip}")


def sysctl(key: str, value: str):
    with open("/proc/sys/" + key.replace(".", "/"), "w") as f:
        f.write(value)


def configure(lab: dict, me: dict) -> dict:
    """Everything in as few programs as possible: each exec costs tens of ms under TCG."""
    marks = {}
    modprobe = subprocess.Popen(["modprobe", "-a"] + MODULES + (["8021q"] if me.get("vlan") else []), env=ENV)
    mounts()
    marks["mounts"] = uptime()
    socket.sethostname(me["name"])
    for key in ("all", "default"):
        sysctl(f"net.ipv6.conf.{key}.disable_ipv6", "1")
    nic = nic_named(me["mac"])
    sysctl(f"net.ipv6.conf.{nic}.disable_ipv6", "1")
    dev = nic
    script = ["link set lo up", f"link set {nic} up"]
    if me.get("vlan"):
        dev = f"{nic}.{me['vlan']}"
        script += [f"link add link {nic} name {dev} type vlan id {me['vlan']}", f"link set {dev} up"]
    script += [f"addr add {ip}/{lab['prefixlen']} dev {dev}" for ip in me["ips"]]
    script += [
        f"neigh replace {ip} lladdr {o['mac']} dev {dev} nud permanent"
        for o in lab["vfs"]
        if o is not me and o.get("vlan") == me.get("vlan")
        for ip in o["ips"]
    ]
    r = subprocess.run(
        ["ip", "-batch", "-"],
        input="\n".join(script) + "\n",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
    )
    if r.returncode:
        raise RuntimeError(f"ip: {r.stdout.strip()}")
    marks["addresses"] = uptime()
    if modprobe.wait():
        raise RuntimeError(f"modprobe {' '.join(MODULES)} failed")
    marks["modules"] = uptime()
    sh("rdma", "link", "add", "rxe0", "type", "rxe", "netdev", nic)
    gid = gid_index(me["ips"][0])
    marks["gid"] = uptime()
    return {"nic": nic, "dev": dev, "rdma_dev": "rxe0", "gid_index": gid, "phases": marks}


class Jobs:
    def __init__(self, box: str):
        self.box = box
        for d in ("req", "out", "done"):
            os.makedirs(f"{box}/{d}", exist_ok=True)
        self.running = {}  # pid -> (id, kill deadline or None)

    def start(self, jid: str):
        path = f"{self.box}/req/{jid}.json"
        try:
            with open(path) as f:
                spec = json.load(f)
            os.unlink(path)
        except (OSError, ValueError):
            return
        out = open(f"{self.box}/out/{jid}.1", "wb")
        err = open(f"{self.box}/out/{jid}.2", "wb")
        try:
            p = subprocess.Popen(
                spec["argv"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=ENV,
                cwd="/root",
                start_new_session=True,
            )
        except OSError as e:
            err.write(f"{spec['argv'][0]}: {e.strerror}\n".encode())
            p = None
        out.close()
        err.close()
        if p is None:
            write_atomic(f"{self.box}/done/{jid}.json", {"rc": 127})
            return
        p.returncode = 0  # this loop reaps it (PID 1 reaps every orphan too); Popen must never wait
        timeout = spec.get("timeout")
        self.running[p.pid] = [jid, time.monotonic() + timeout if timeout else None, False]

    def kill(self, jid: str):
        try:
            os.unlink(f"{self.box}/req/{jid}.kill")
        except OSError:
            pass
        for job in self.running.values():
            if job[0] == jid:
                job[1] = time.monotonic()

    def tick(self):
        now = time.monotonic()
        for pid, job in self.running.items():
            if job[1] is not None and now >= job[1]:
                sig = signal.SIGKILL if job[2] else signal.SIGTERM
                try:
                    os.killpg(pid, sig)
                except OSError:
                    pass
                job[1], job[2] = now + 2, True
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job = self.running.pop(pid, None)
            if job:
                rc = os.waitstatus_to_exitcode(status)
                write_atomic(f"{self.box}/done/{job[0]}.json", {"rc": rc if rc >= 0 else 128 - rc})

    def serve(self):
        req = f"{self.box}/req"
        while True:
            for name in os.listdir(req):
                if name.endswith(".json"):
                    self.start(name[:-5])
                elif name.endswith(".kill"):
                    self.kill(name[:-5])
            self.tick()
            time.sleep(0.03 if self.running else 0.06)


def main():
    started = uptime()
    os.environ.clear()
    os.environ.update(ENV)
    with open("/proc/cmdline") as f:
        index = int(next(a for a in f.read().split() if a.startswith("ibwg=")).split("=", 1)[1])
    with open(f"{ROOT}/lab.json") as f:
        lab = json.load(f)
    me = next(v for v in lab["vfs"] if v["index"] == index)
    box = f"{ROOT}/{me['name']}"
    jobs = Jobs(box)
    try:
        info = configure(lab, me)
        info["agent_start"], info["uptime"] = started, uptime()
        write_atomic(f"{box}/ready.json", info)
        log(f"ready: {info}")
    except Exception as e:  # the host reads the reason from failed.json and the console
        write_atomic(f"{box}/failed.json", {"error": str(e)})
        log(f"setup failed: {e}")
    jobs.serve()


if __name__ == "__main__":
    sys.exit(main())

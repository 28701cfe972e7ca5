"""What a guest boots: the host's Debian kernel as an ELF vmlinux, a tiny initramfs ibwire builds, QEMU's accelerator.

The vmlinux is the uncompressed payload of /boot/vmlinuz-VER (a bzImage carries it xz/gzip/zstd-compressed);
QEMU boots an ELF kernel through its PVH entry note, skipping the in-guest decompressor.  The initramfs
(cpio "newc", initramfs-tools' format) holds busybox-static, the modules needed to mount the host root over
9p with an overlay (dependencies from modules.dep), an init script and the guest agent.  Everything else
(rdma_rxe, sch_netem, 8021q) is loaded later from the host's /lib/modules seen through 9p.
"""

import gzip
import lzma
import os
import shutil
import subprocess
import zlib
from pathlib import Path
from typing import List, Optional, Tuple

from ibwire.errors import UserError

PACKAGES = "qemu-system-x86 linux-image-amd64 busybox-static rdma-core ibverbs-utils rdmacm-utils perftest"
EARLY_MODULES = ["virtio_pci", "9pnet_virtio", "9p", "overlay", "virtio_net"]
QEMU = "qemu-system-x86_64"
BUSYBOX = "/bin/busybox"

INIT = r"""#!/bin/busybox sh
# PID 1 of ibwire's RDMA lab guest: host root over 9p (read-only) under a tmpfs overlay, then the agent.
/bin/busybox mount -t devtmpfs dev /dev
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox --install -s /bin
exec </dev/console >/dev/console 2>&1
fail() { echo "ibwire-init: $*"; echo o > /proc/sysrq-trigger; sleep 10; }
for m in $(cat /modules.order); do insmod /modules/$m || echo "ibwire-init: insmod $m failed"; done
mkdir -p /lower /rw /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose ibwroot /lower || fail "9p root"
mount -t tmpfs -o mode=755 tmpfs /rw || fail tmpfs
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot || fail overlay
mkdir -p /newroot/ibwlab
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none ibwctl /newroot/ibwlab || fail "9p control"
for d in dev proc sys; do mount --move /$d /newroot/$d; done
exec switch_root /newroot /usr/bin/python3 -I -S /ibwlab/agent.py
"""


def missing_sentence(what: str) -> str:
    return f"the RDMA lab needs {what}; install it with `apt-get install {PACKAGES}`"


def find_kernel() -> Tuple[str, Path]:
    """(version, /boot/vmlinuz-version) of the newest host kernel package that has rdma_rxe."""
    found = []
    for moddir in Path("/lib/modules").glob("*"):
        image = Path("/boot") / f"vmlinuz-{moddir.name}"
        if image.exists() and list(moddir.glob("kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko*")):
            found.append(moddir.name)
    if not found:
        raise UserError(missing_sentence("a Debian kernel with rdma_rxe (/boot/vmlinuz-* and its modules)"))
    ver = sorted(found, key=lambda v: [int(x) if x.isdigit() else x for x in v.replace("-", ".").split(".")])[-1]
    return ver, Path("/boot") / f"vmlinuz-{ver}"


def check_tools():
    if not shutil.which(QEMU):
        raise UserError(missing_sentence(f"QEMU ({QEMU})"))
    if not os.path.exists(BUSYBOX) or b"ld-linux" in Path(BUSYBOX).read_bytes()[:4096]:
        raise UserError(missing_sentence("a static busybox (busybox-static)"))


def extract_vmlinux(image: Path, out: Path):
    """Write the ELF kernel found inside a bzImage (the first compressed payload that inflates to ELF)."""
    data = image.read_bytes()
    for magic, kind in ((b"\xfd7zXZ\x00", "xz"), (b"\x1f\x8b\x08", "gz"), (b"\x28\xb5\x2f\xfd", "zst")):
        start = data.find(magic)
        while start >= 0:
            elf = _inflate(kind, data[start:])
            if elf and elf[:4] == b"\x7fELF":
                out.write_bytes(elf)
                return
            start = data.find(magic, start + 1)
    raise UserError(f"{image} holds no ELF kernel ibwire can unpack (xz, gzip or zstd)")


def _inflate(kind: str, blob: bytes) -> Optional[bytes]:
    try:
        if kind == "xz":
            return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(blob)
        if kind == "gz":
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(blob)
        if shutil.which("zstd"):
            r = subprocess.run(["zstd", "-dcq"], input=blob, capture_output=True)
            return r.stdout or None
    except (lzma.LZMAError, zlib.error, OSError):
        return None
    return None


def module_order(kver: str, names: List[str]) -> List[Path]:
    """Module files for `names` and their dependencies, each after what it depends on (modules.dep)."""
    base = Path("/lib/modules") / kver
    deps, by_name = {}, {}
    for line in (base / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
        by_name[_mod_name(path)] = path
    order: List[str] = []

    def add(path: str):
        if path in order:
            return
        for d in reversed(deps.get(path, [])):  # modules.dep lists the deepest dependency last
            add(d)
        order.append(path)

    for n in names:
        if n not in by_name:
            raise UserError(f"kernel {kver} has no module {n}")
        add(by_name[n])
    return [base / p for p in order]


def _mod_name(path: str) -> str:
    name = os.path.basename(path)
    for ext in (".xz", ".zst", ".gz"):
        name = name.removesuffix(ext)
    return name.removesuffix(".ko").replace("-", "_")


def _module_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    if path.suffix == ".xz":
        return lzma.decompress(raw)
    if path.suffix == ".gz":
        return gzip.decompress(raw)
    if path.suffix == ".zst":
        return subprocess.run(["zstd", "-dcq", str(path)], capture_output=True, check=True).stdout
    return raw


class _Cpio:
    """Writer of the cpio "newc" format the kernel unpacks (Documentation/driver-api/early-userspace)."""

    def __init__(self):
        self.parts: List[bytes] = []
        self.ino = 1

    def add(self, name: str, mode: int, data: bytes = b""):
        nb = name.encode() + b"\0"
        fields = [self.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(nb), 0]
        hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
        self.ino += 1
        self.parts += [hdr, nb, b"\0" * (-(len(hdr) + len(nb)) % 4), data, b"\0" * (-len(data) % 4)]

    def bytes(self) -> bytes:
        self.add("TRAILER!!!", 0)
        return b"".join(self.parts)


def build_initramfs(kver: str, out: Path):
    cpio = _Cpio()
    for d in ("bin", "dev", "proc", "sys", "modules"):
        cpio.add(d, 0o040755)
    cpio.add("bin/busybox", 0o100755, Path(BUSYBOX).read_bytes())
    mods = module_order(kver, EARLY_MODULES)
    for m in mods:
        cpio.add(f"modules/{_mod_name(m.name)}.ko", 0o100644, _module_bytes(m))
    cpio.add("modules.order", 0o100644, "".join(f"{_mod_name(m.name)}.ko\n" for m in mods).encode())
    cpio.add("init", 0o100755, INIT.encode())
    out.write_bytes(gzip.compress(cpio.bytes(), compresslevel=1))


def accelerator(choice: str) -> Tuple[str, List[str]]:
    """('kvm'|'tcg', QEMU arguments).  KVM only with a hardware hypervisor module: kvm_pvm (a nested, PVM-only
    KVM) runs a stock kernel far slower than TCG (rxe-lab.md)."""
    kvm_ok = (
        os.access("/dev/kvm", os.R_OK | os.W_OK)
        and not os.path.exists("/sys/module/kvm_pvm")
        and any(os.path.exists(f"/sys/module/{m}") for m in ("kvm_intel", "kvm_amd"))
    )
    if choice == "kvm" and not kvm_ok:
        raise UserError(
            "KVM cannot run a stock kernel here (no usable /dev/kvm with kvm_intel or kvm_amd); use --accel tcg"
        )
    if choice == "kvm" or (choice == "auto" and kvm_ok):
        return "kvm", ["-accel", "kvm", "-cpu", "host,-arch-capabilities"]
    return "tcg", ["-accel", "tcg,thread=multi,tb-size=128", "-cpu", "max"]

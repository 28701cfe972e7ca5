"""The verbs backend against the real pyverbs (Debian python3-pyverbs) on this kernel, which has no RDMA:
it must fail with one clear sentence and no traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ibwire.capture.backends.verbs import Verbs, import_pyverbs
from ibwire.capture.journal import Journal
from ibwire.errors import UserError

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "standin"))
import fake_sysfs  # noqa: E402


def _capture_verbs(out, env, *more):
    """`ibwire capture --pf mlx5_0 --backend verbs -w out ...` in a child process with `env`."""
    args = ["capture", "--pf", "mlx5_0", "--backend", "verbs", "-w", str(out), *more]
    cmd = [sys.executable, "-c", "from ibwire.cli import main; main()", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)


def test_real_pyverbs_imports():
    import_pyverbs()  # python3-pyverbs must be installed (apt); failing here means it is missing
    import pyverbs.flow  # noqa: F401


def test_verbs_backend_on_kernel_without_rdma_is_one_sentence(tmp_path):
    if Path("/sys/class/infiniband").is_dir():
        pytest.fail("this test expects a kernel without RDMA devices")
    j = Journal("test", tmp_path)
    with pytest.raises(UserError) as e:
        Verbs("mlx5_0", 1).arm(j)
    msg = str(e.value)
    assert msg.startswith("this kernel has no RDMA support") and "\n" not in msg
    assert j.disarm() == []


def test_verbs_cli_with_sysfs_device_but_no_kernel_rdma(tmp_path):
    root = fake_sysfs.build(tmp_path / "sys", "Ethernet")
    env = dict(os.environ, IBWIRE_SYSFS_ROOT=str(root), IBWIRE_RUN_DIR=str(tmp_path / "run"))
    r = _capture_verbs(tmp_path / "x.pcap", env)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ibwire: this kernel has no RDMA support")
    assert not list((tmp_path / "run").glob("capture-*.json"))


def test_verbs_standin_pyverbs_polls_in_batches_writes_every_frame_and_counts_device_drops(tmp_path):
    """pyverbs stand-in (tests/standin/verbs/pyverbs: no RDMA device can run here) delivering 3,000 frames."""
    from ibwire.files import iter_frames
    from ibwire.lab import topology, traffic

    root = fake_sysfs.build(tmp_path / "sys", "Ethernet")
    oob = root / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "hw_counters" / "out_of_buffer"
    oob.parent.mkdir(parents=True)
    oob.write_text("100\n")
    sent = traffic.write_burst(topology.describe("x"), "vf2", "remote", 3000, str(tmp_path / "in.pcap"))
    out = tmp_path / "out.pcap"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(HERE / "standin" / "verbs"), os.environ.get("PYTHONPATH", "")]),
        IBWIRE_SYSFS_ROOT=str(root),
        IBWIRE_RUN_DIR=str(tmp_path / "run"),
        STANDIN_VERBS_PCAP=sent,
        STANDIN_VERBS_OOB="7",
        STANDIN_VERBS_OOB_FILE=str(oob),
    )
    r = _capture_verbs(out, env, "--duration", "2")
    assert r.returncode == 0, r.stderr
    assert [f.data for f in iter_frames(str(out))] == [f.data for f in iter_frames(sent)]  # every frame, in order
    assert "drops from its out_of_buffer counter" in r.stderr
    assert "backend drops: 7" in r.stderr  # the device's count of packets it had no buffer for
    assert not list((tmp_path / "run").glob("capture-*.json"))

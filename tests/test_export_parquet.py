"""`ibwire export` writes per-packet records and the conversation table as Parquet that other tools read:
a folder of exports from several captures queries as one dataset, with the same numbers as stats/flows."""

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import SimpleNamespace

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from test_outputs_safe import cli

PUBLIC = Path(__file__).resolve().parents[1].parent / "shared" / "captures" / "public"
CAPS = Path(__file__).resolve().parents[1] / "captures"


def run_ibwire(*args):
    """`ibwire ARGS` run in this process (no interpreter start-up per command): status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = cli(*args)
    return SimpleNamespace(returncode=status or 0, stdout=out.getvalue(), stderr=err.getvalue())


def test_export_folder_queries_like_stats(tmp_path):
    caps = [
        PUBLIC / "m3_nvme_nvme-discover.pcap",
        PUBLIC / "srinivas_infiniband.pcap",
        PUBLIC / "m3_mlx_rocev1_test.pcap",
    ]
    want_ops = {}
    for c in caps:
        r = run_ibwire(
            "export",
            c,
            "-o",
            tmp_path / "packets" / f"{c.stem}.parquet",
            "--flows",
            tmp_path / "flows" / f"{c.stem}.parquet",
        )
        assert r.returncode == 0, r.stderr
        assert "wrote" in r.stderr and r.stdout == ""
        st = json.loads(run_ibwire("stats", c, "--format", "json").stdout)
        for row in st["by_opcode"]:
            if row["opcode"] is not None:
                want_ops[row["opcode"]] = want_ops.get(row["opcode"], 0) + row["packets"]
    packets = ds.dataset(str(tmp_path / "packets"), format="parquet").to_table()
    assert packets.num_rows == 65 + 43 + 624
    bth = packets.filter(pc.is_valid(packets["operation"]))
    got = bth.group_by("bth_opcode").aggregate([("bth_opcode", "count")]).to_pylist()
    assert {r["bth_opcode"]: r["bth_opcode_count"] for r in got} == want_ops
    ib = packets.filter(pc.equal(packets["link_kind"], "ib"))
    assert set(ib["vcrc_status"].to_pylist()) == {"good"}
    assert "2.2.2.1" in set(packets["addr_src"].to_pylist())
    flows = pq.read_table(tmp_path / "flows" / "m3_mlx_rocev1_test.parquet")
    ref = json.loads(run_ibwire("flows", PUBLIC / "m3_mlx_rocev1_test.pcap", "--format", "json").stdout)
    assert flows.num_rows == len(ref["conversations"])
    assert sorted(flows["payload_bytes"].to_pylist()) == sorted(r["payload_bytes"] for r in ref["conversations"])


def test_export_refuses_a_bad_output_name(tmp_path):
    r = run_ibwire("export", PUBLIC / "m3_nvme_nvme-discover.pcap", "-o", tmp_path / "x.csv")
    assert r.returncode == 2 and ".parquet" in r.stderr


def test_export_of_a_capture_without_packets_writes_an_empty_table(tmp_path):
    """A capture holding only its file header (a capture stopped at once) exports zero rows, same columns."""
    src = tmp_path / "none.pcap"
    src.write_bytes((CAPS / "atomics.pcap").read_bytes()[:24])
    out = tmp_path / "none.parquet"
    r = run_ibwire("export", src, "-o", out)
    assert r.returncode == 0, r.stderr
    table = pq.read_table(out)
    assert table.num_rows == 0 and "bth_p_key" in table.column_names

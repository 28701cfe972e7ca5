"""Fleet scale: `ibwire export DIR -o DATASET --partition-by host,date` writes a hive-partitioned dataset;
the PySpark job in examples/ (Spark local mode, one session) computes the per-operation and lossy-QP
tables across hosts, and DuckDB computes the same tables from the same files.  Both agree, the packet
counts equal tshark's, and the lossy QPs are exactly the ones the scenarios declare lossy."""

import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

import duckdb
import pytest
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point

ROOT = Path(__file__).resolve().parents[1]
CAPS = ROOT / "captures"
PUBLIC = ROOT.parent / "shared" / "captures" / "public"
HOSTS = {
    "gpu-a": [CAPS / "loss-retransmit.pcap", CAPS / "congestion.pcap"],
    "gpu-b": [CAPS / "roce-v6-vlan.pcap", CAPS / "atomics.pcap", PUBLIC / "m3_nvme_nvme-discover.pcap"],
}

DUCK_OPS = """select host, operation, count(*) as packets, sum(frame_len) as bytes, sum(payload_len) as payload_bytes
              from read_parquet('{ds}/packets/*/*/*.parquet', hive_partitioning = true)
              where operation is not null group by all order by host, operation"""
DUCK_LOSSY = """select host, cast(date as varchar), transport, a, b, qpn_a, qpn_b, coalesce(drops, 0) as drops,
                       coalesce(retransmissions, 0) as retransmissions,
                       coalesce(list_sum(map_values(naks)), 0) as naks, coalesce(rnr_naks, 0) as rnr_naks,
                       coalesce(bad_icrc, 0) as bad_icrc
                from read_parquet('{ds}/flows/*/*/*.parquet', hive_partitioning = true)
                where coalesce(drops, 0) + coalesce(retransmissions, 0) + coalesce(list_sum(map_values(naks)), 0)
                      + coalesce(rnr_naks, 0) + coalesce(bad_icrc, 0) > 0
                order by host, date, a, b, qpn_a, qpn_b"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    for host, caps in HOSTS.items():
        (d / "captures" / host).mkdir(parents=True)
        for c in caps:
            (d / "captures" / host / c.name).symlink_to(c)
    r = run_ibwire("export", d / "captures", "-o", d / "ds", "--partition-by", "host,date")
    assert r.returncode == 0, r.stderr
    return d / "ds"


def test_dataset_is_hive_partitioned_by_host_and_date(dataset, tshark):
    con = duckdb.connect()
    got = con.execute(
        f"select host, cast(date as varchar), count(*) from "
        f"read_parquet('{dataset}/packets/*/*/*.parquet', hive_partitioning = true) "
        f"group by all"
    ).fetchall()
    want = Counter()
    for host, caps in HOSTS.items():
        for c in caps:
            out = subprocess.run(
                ["tshark", "-r", str(c), "-T", "fields", "-e", "frame.time_epoch"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            for t in out:
                want[(host, str(__import__("datetime").datetime.utcfromtimestamp(int(float(t))).date()))] += 1
    assert Counter({(h, d): n for h, d, n in got}) == want
    for host, caps in HOSTS.items():
        for c in caps:
            assert list(dataset.glob(f"packets/host={host}/date=*/{c.stem}.parquet"))
            assert list(dataset.glob(f"flows/host={host}/date=*/{c.stem}.parquet"))


def test_spark_job_agrees_with_duckdb_and_the_scenarios(dataset, tshark):
    sys.path.insert(0, str(ROOT / "examples"))
    import fleet_spark
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("ibwire-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    try:
        ops = [tuple(r) for r in fleet_spark.per_operation(spark, str(dataset)).collect()]
        lossy = [tuple(r) for r in fleet_spark.lossy_qps(spark, str(dataset)).collect()]
    finally:
        spark.stop()
    con = duckdb.connect()
    assert ops == con.execute(DUCK_OPS.format(ds=dataset)).fetchall()
    assert lossy == con.execute(DUCK_LOSSY.format(ds=dataset)).fetchall()
    # packets with a BTH per host: tshark's count
    for host, caps in HOSTS.items():
        n = sum(
            len(
                subprocess.run(
                    ["tshark", "-r", str(c), "-Y", "infiniband.bth", "-T", "fields", "-e", "frame.number"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.split()
            )
            for c in caps
        )
        assert sum(r[2] for r in ops if r[0] == host) == n
    # the lossy QPs are the scenario's lossy ones, with its numbers
    scen = tomllib.loads((CAPS / "loss-retransmit.toml").read_text())
    want = set()
    for q in scen["qp"]:
        e = scen["expect"]["flow"].get(q["name"])
        if e and (e["drops"] or e["retransmits"] or e["naks_psn"] or e["rnr"] or e.get("bad_icrc")):
            want.add(
                (frozenset((q["src_qpn"], q["dst_qpn"])), e["drops"], e["retransmits"], e["rnr"], e.get("bad_icrc", 0))
            )
    got = {(frozenset((r[5], r[6])), r[7], r[8], r[10], r[11]) for r in lossy}
    assert got == want and all(r[0] == "gpu-a" for r in lossy)

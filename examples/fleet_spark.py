"""Fleet-wide RDMA health with PySpark, over a dataset written by

    ibwire export captures/ -o fleet --partition-by host,date    # captures/<host>/*.pcap

Two tables across every host and day:
  * per operation: packets, bytes and payload bytes of each RDMA operation (RC SEND First, RC Acknowledge …)
    on each host;
  * lossy QPs: every conversation whose transport lost or resent something (drops, retransmissions,
    NAKs, RNR NAKs, bad ICRCs), with its host, day, ends and QPNs.

Run:  spark-submit examples/fleet_spark.py fleet      (or: python examples/fleet_spark.py fleet)
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def _read(spark, path: str):
    """A hive-partitioned Parquet table; ibwire's nanosecond timestamps read as integers (Spark's own
    timestamps hold microseconds)."""
    spark.conf.set("spark.sql.legacy.parquet.nanosAsLong", "true")
    return spark.read.option("basePath", path).parquet(path)


def per_operation(spark, dataset: str):
    packets = _read(spark, f"{dataset}/packets")
    return (
        packets.where(F.col("operation").isNotNull())
        .groupBy("host", "operation")
        .agg(
            F.count(F.lit(1)).alias("packets"),
            F.sum("frame_len").alias("bytes"),
            F.sum("payload_len").alias("payload_bytes"),
        )
        .orderBy("host", "operation")
    )


def lossy_qps(spark, dataset: str):
    flows = _read(spark, f"{dataset}/flows")
    naks = F.aggregate(
        F.map_values(F.coalesce(F.col("naks"), F.create_map().cast("map<string,bigint>"))),
        F.lit(0).cast("bigint"),
        lambda acc, x: acc + x,
    )
    lossy = flows.select(
        "host",
        F.col("date").cast("string").alias("date"),
        "transport",
        "a",
        "b",
        "qpn_a",
        "qpn_b",
        F.coalesce("drops", F.lit(0)).alias("drops"),
        F.coalesce("retransmissions", F.lit(0)).alias("retransmissions"),
        naks.alias("naks"),
        F.coalesce("rnr_naks", F.lit(0)).alias("rnr_naks"),
        F.coalesce("bad_icrc", F.lit(0)).alias("bad_icrc"),
    )
    return lossy.where(
        (F.col("drops") > 0)
        | (F.col("retransmissions") > 0)
        | (F.col("naks") > 0)
        | (F.col("rnr_naks") > 0)
        | (F.col("bad_icrc") > 0)
    ).orderBy("host", "date", "a", "b", "qpn_a", "qpn_b")


def main(dataset: str) -> None:
    spark = SparkSession.builder.appName("ibwire-fleet").getOrCreate()
    per_operation(spark, dataset).show(100, truncate=False)
    lossy_qps(spark, dataset).show(100, truncate=False)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fleet")

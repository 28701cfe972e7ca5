"""TCP's and ICMP's fields in `-T fields`, `-T json -e` and `-Y` as tshark 4.0 gives them (issue 27): on every
capture with TCP or ICMP and on crafted streams with every analysis flag, the rows of a set of tcp.* and icmp.*
fields (relative sequence numbers, tcp.stream, the SEQ/ACK analysis, flags, options and payload as bare hex,
icmp.resp_to, response times, the data's timestamp) are tshark's, line for line, under display filters that
need the state across frames (relative numbers, tcp.stream, analysis flags, icmp.resp_to) and hide frames
that state still counts.
"""

import json
from pathlib import Path

import pytest
from conftest import run_ibwire
from one_process import ibwire_runs
from test_tcp_tshark import crafted
from test_tshark_shapes import run_tshark
from tshark_oracle import PUBLIC

ROOT = Path(__file__).resolve().parents[1]
LAB = ("atomic-cmp-swap", "atomic-fetch-add", "rc-read", "rc-send", "rc-write-loss2", "rc-write", "uc-write", "ud-send")
CAPTURES = [ROOT / "captures" / f"rxe-{n}.pcap" for n in LAB] + [
    ROOT / "captures" / n for n in ("ud-ipoib.pcap", "multitenant-breach.pcap", "multitenant-clean.pcap")
]
CAPTURES += [
    PUBLIC / n
    for n in (
        "m3_nvme_nvme-discover.pcap",
        "m3_rdma-write-read_ibdump_read2.pcap",
        "m3_rping_uccl_uccl-mini_p2p-test2_rdma-nccl2.pcap",
        "oferby_proxy_roce.pcap",
        "srinivas_infiniband.pcap",
    )
]
TCP = (
    "tcp.seq tcp.ack tcp.seq_raw tcp.flags tcp.stream tcp.len tcp.nxtseq tcp.port tcp.completeness tcp.window_size "
    "tcp.window_size_scalefactor tcp.flags.str tcp.flags.syn tcp.time_relative tcp.time_delta tcp.checksum.status "
    "tcp.options tcp.options.nop tcp.options.mss_val tcp.options.sack_le tcp.payload tcp.analysis "
    "tcp.analysis.flags tcp.analysis.acks_frame tcp.analysis.ack_rtt tcp.analysis.initial_rtt "
    "tcp.analysis.bytes_in_flight tcp.analysis.push_bytes_sent tcp.analysis.retransmission "
    "tcp.analysis.duplicate_ack_num tcp.connection.syn tcp"
).split()
ICMP = (
    "icmp.type icmp.code icmp.checksum icmp.checksum.status icmp.ident icmp.seq icmp.ident_le icmp.seq_le "
    "icmp.resp_to icmp.resptime icmp.data_time icmp.data_time_relative icmp"
).split()
FILTERS = (
    "tcp || icmp",
    "tcp.len > 0 || icmp.resp_to",  # hides the handshake the relative numbers start from, the echo requests
    "tcp.seq == 1 || tcp.analysis.flags || icmp.seq_le > 256",
    "tcp.ack > 10 && tcp.stream == 0 || tcp.flags & 0x02",
)
FLAGS = (
    "retransmission fast_retransmission spurious_retransmission out_of_order lost_segment ack_lost_segment "
    "duplicate_ack window_full window_update keep_alive keep_alive_ack zero_window zero_window_probe "
    "zero_window_probe_ack reused_ports"
).split()
MORE = ("tcp.analysis.acks_frame", "tcp.flags.push == 1", "icmp.type == 8", "tcp.time_delta > 0.001")


def _args(flt: str, keys: list, *more: str) -> list:
    return ["-n", "-Y", flt, "-T", "fields", "-e", "frame.number", *(a for k in keys for a in ("-e", k)), *more]


def _rows(runs) -> list:
    """(tshark's lines, ibwire's lines) of each (capture, filter, keys, more arguments) run: ibwire's runs in one
    process (one_process.py), as the output is the point here."""
    ours = ibwire_runs([["decode", path, *_args(*rest)[1:]] for path, *rest in runs])
    return [(run_tshark(path, *_args(*rest)).splitlines(), out.splitlines()) for (path, *rest), out in zip(runs, ours)]


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_fields_under_filters_are_tsharks(path, tshark):
    """Every filter's rows of the tcp and icmp fields are tshark's; the captures hold TCP or ICMP."""
    shown = 0
    for flt, (theirs, ours) in zip(FILTERS, _rows([(path, flt, TCP + ICMP) for flt in FILTERS])):
        assert ours == theirs, flt
        shown += len(theirs)
    assert shown


@pytest.mark.parametrize("flt", MORE)
def test_more_filters_are_tsharks(flt, tshark):
    """More filters, on the captures with a TCP stream and with ICMP echoes."""
    paths = (ROOT / "captures" / "rxe-ud-send.pcap", PUBLIC / "srinivas_infiniband.pcap")
    for path, (theirs, ours) in zip(paths, _rows([(path, flt, TCP + ICMP) for path in paths])):
        assert ours == theirs, (path.name, flt)


def test_fields_of_every_analysis_flag_are_tsharks(tmp_path, tshark):
    """The crafted streams (test_tcp_tshark.crafted: lost, out-of-order and retransmitted segments, duplicate
    ACKs, zero windows, keep-alives, reused ports): the fields, and the frames each analysis flag selects."""
    path = tmp_path / "tcp.pcap"
    crafted(path)
    keys = ["tcp.seq", "tcp.analysis.rto", "tcp.analysis.rto_frame"]
    (theirs, ours), *flags = _rows([(path, "tcp", TCP)] + [(path, f"tcp.analysis.{flag}", keys) for flag in FLAGS])
    assert ours == theirs and len(theirs) > 30
    selected = 0
    for flag, (theirs, ours) in zip(FLAGS, flags):
        assert ours == theirs, flag
        selected += bool(theirs)
    assert selected == len(FLAGS) - 1  # (all but the reused ports)


def test_csv_quotes_tcp_ports_as_a_list(tshark):
    """-T fields with -E separator and quote, and -E header: tshark's text."""
    path = ROOT / "captures" / "rxe-rc-send.pcap"
    runs = [
        (path, "tcp", ["tcp.port", "tcp.flags.str"], "-E", "separator=,", "-E", "quote=d"),
        (path, "tcp.len > 0", ["tcp.seq", "tcp.analysis"], "-E", "header=y"),
    ]
    for theirs, ours in _rows(runs):
        assert ours == theirs


def test_json_e_values_are_the_fields_text(tshark):
    """-T json -e: the tcp and icmp values tshark writes (bytes as bare hex, a field without a value as 1)."""
    path = ROOT / "captures" / "rxe-rc-send.pcap"
    keys = ["tcp.seq", "tcp.stream", "tcp.analysis", "tcp.options.nop", "tcp.connection.syn", "tcp.options"]
    args = ["-n", "-Y", "tcp.len > 0 || tcp.flags.syn == 1", "-T", "json", *(a for k in keys for a in ("-e", k))]
    layers = lambda text: [p["_source"]["layers"] for p in json.loads(text)]
    assert layers(run_ibwire("decode", path, *args[1:], check=True).stdout) == layers(run_tshark(path, *args))


def test_absolute_time_comparison_is_refused():
    """-Y cannot compare icmp.data_time yet: an error naming it, never a different selection."""
    done = run_ibwire("decode", ROOT / "captures" / "ud-ipoib.pcap", "-Y", 'icmp.data_time > "2020-01-01"')
    assert done.returncode != 0 and "icmp.data_time" in done.stderr

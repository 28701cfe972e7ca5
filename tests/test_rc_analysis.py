"""Per-packet RC analysis fields (bth.analysis.*, in the style of Wireshark's tcp.analysis.*): the frames
`-Y bth.analysis.retransmission` and its kin select are the ones the generator declares it resent, lost,
resent on a timeout or sent after a capture gap; which request an ACK, NAK or READ response answers, and
the time since, agree with tshark's decode of the same capture; the fields reach every output format and
the Parquet export."""

import json
import subprocess
from functools import partial
from pathlib import Path

import conftest
import one_process  # run_ibwire forked from a process that imported ibwire: the output is the point
import pyarrow.parquet as pq
import pytest

from ibwire.synth import frames, load

run_ibwire = partial(one_process.run_ibwire, unwrapped=True)
CAPS = Path(__file__).resolve().parents[1] / "captures"
SCENARIOS = ("loss-retransmit", "capture-gap", "roce-multitenant-breach", "multitenant-breach", "ack-timeout")
KINDS = {
    "resent": "bth.analysis.retransmission",
    "lost": "bth.analysis.lost",
    "timeout": "bth.analysis.timeout_retransmission",
    "duplicate": "bth.analysis.duplicate",
}


def _truth(name):
    truth: dict = {}
    for _ in frames(load(str(CAPS / f"{name}.toml")), truth=truth):
        pass
    return truth


def _column(pcap, flt, *fields):
    r = run_ibwire("decode", pcap, "-Y", flt, "-T", "fields", *[a for f in fields for a in ("-e", f)])
    assert r.returncode == 0, r.stderr
    return [line.split("\t") for line in r.stdout.splitlines()]


@pytest.mark.parametrize("name", SCENARIOS)
def test_filters_select_the_frames_the_generator_resent(name):
    truth, pcap = _truth(name), CAPS / f"{name}.pcap"
    assert truth["resent"], "every scenario here resends something"
    assert [int(f) for (f,) in _column(pcap, "bth.analysis.retransmission", "frame.number")] == truth["resent"]
    rows = _column(pcap, "bth.analysis", "frame.number", "bth.analysis.not_captured", *KINDS.values())
    for i, (kind, field) in enumerate(KINDS.items()):
        assert [int(r[0]) for r in rows if r[2 + i] == "1"] == truth[kind], field
    assert {int(r[0]): int(r[1]) for r in rows if r[1]} == truth["not_captured"]


def _tshark(pcap):
    """(frame, nanoseconds, source, destination, opcode, PSN, AETH syndrome or None) of each BTH frame, by tshark."""
    fields = ["frame.number", "frame.time_epoch", "ip.src", "ip.dst"]
    fields += ["infiniband.bth.opcode", "infiniband.bth.psn", "infiniband.aeth.syndrome"]
    rows = []
    for f, t, src, dst, op, psn, syn in conftest.tshark_fields(
        pcap, *fields, display_filter="infiniband.bth", first=True
    ):
        sec, _, frac = t.partition(".")
        rows.append(
            (
                int(f),
                int(sec) * 10**9 + int(frac.ljust(9, "0")),
                src,
                dst,
                int(op),
                int(psn),
                int(syn, 0) if syn else None,
            )
        )
    return rows


REQUESTS = set(range(0, 12)) | {0x0C, 0x13, 0x14}  # RC SEND, WRITE, READ request, atomics


@pytest.mark.parametrize(
    "pcap",
    [
        "loss-retransmit.pcap",
        "capture-gap.pcap",
        "rxe-rc-read.pcap",
        "rxe-atomic-fetch-add.pcap",
        "rxe-rc-write-loss2.pcap",
    ],
)
def test_answers_name_the_latest_sending_as_tshark_reads_the_capture(pcap):
    """An ACK or NAK answers the last sending of the request with its PSN, a READ response the last READ
    request whose PSNs begin nearest at or below its PSN, the other way; the round-trip time is the gap between the two frames."""
    rows = _tshark(CAPS / pcap)
    ours = {
        int(f): (int(a or 0), float(rtt or 0), int(r or 0))
        for f, a, rtt, r in _column(
            CAPS / pcap,
            "bth.analysis.acks_frame || bth.analysis.read_request_frame",
            "frame.number",
            "bth.analysis.acks_frame",
            "bth.analysis.ack_rtt",
            "bth.analysis.read_request_frame",
        )
    }
    time = {r[0]: r[1] for r in rows}
    last, checked = {}, 0
    for f, t, src, dst, op, psn, syn in rows:
        if op in REQUESTS:
            last[(src, dst, psn)] = f
            if op == 0x0C:
                last.setdefault((src, dst, "read"), {})[psn] = f
        elif f in ours:
            acks, rtt, read = ours[f]
            if read:  # the READ whose PSNs begin nearest below the response's
                reads = last[(dst, src, "read")]
                assert read == reads[max(p for p in reads if p <= psn)], f
            if acks:
                assert acks == last[(dst, src, psn)], f
                assert abs(rtt - (t - time[acks]) / 1e9) < 2e-9, f
            checked += 1
        elif syn is not None and (syn >> 5) & 3 in (1, 3) and (dst, src, psn) in last:
            pytest.fail(f"frame {f}, a NAK of a PSN sent before, names no request it answers")
    assert checked >= 10


def test_every_output_carries_the_fields(tmp_path):
    pcap, truth = CAPS / "loss-retransmit.pcap", _truth("loss-retransmit")
    resent = truth["resent"]
    r = run_ibwire("decode", pcap, "-T", "jsonl")
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [d["frame"] for d in docs if d["layers"].get("bth.analysis", {}).get("retransmission")] == resent
    for fmt in ("json", "ek"):
        r = run_ibwire("decode", pcap, "-T", fmt, "-Y", "bth.analysis.retransmission")
        assert r.returncode == 0 and r.stdout.count(
            '"infiniband.bth.analysis"' if fmt == "json" else '"infiniband_infiniband_bth_analysis_retransmission":true'
        ) == len(resent)
    r = run_ibwire(
        "decode",
        pcap,
        "-T",
        "csv",
        "-e",
        "frame.number",
        "-e",
        "bth.analysis.retry_cause",
        "-Y",
        "bth.analysis.retry_cause",
    )
    assert r.stdout.splitlines()[1:] == ["17,nak", "46,nak", "122,rnr"]  # two NAKs and an RNR NAK declared
    r = run_ibwire("decode", pcap, "-V", "-Y", f"frame.number == {truth['lost'][0]}")
    tree = r.stdout.split("[RC analysis]\n")[1].splitlines()
    assert tree[:3] == [
        "        [Retransmission: True]",
        "        [Resent after a loss: True]",
        "        [Retry cause: nak]",
    ]
    out = tmp_path / "p.parquet"
    assert run_ibwire("export", pcap, "-o", out).returncode == 0
    t = pq.read_table(out).to_pydict()
    assert [f for f, x in zip(t["frame_number"], t["bth_analysis_retransmission"]) if x] == resent
    assert [f for f, x in zip(t["frame_number"], t["bth_analysis_lost"]) if x] == truth["lost"]
    assert run_ibwire("export", pcap, "-o", out, "-Y", "bth.analysis.lost").returncode == 0
    assert pq.read_table(out).column("frame_number").to_pylist() == truth["lost"]
    r = run_ibwire("stats", pcap, "-Y", "bth.analysis.retransmission", "--format", "json")
    assert json.loads(r.stdout)["summary"]["packets"] == len(resent)


def test_a_pipe_cannot_be_analysed_ahead():
    r = run_ibwire("decode", "-", "-Y", "bth.analysis.retransmission", input="")
    assert r.returncode != 0 and "save standard input to a file" in r.stderr


FLOW_KINDS = {
    "retransmission": "bth.analysis.retransmission",
    "lost": "bth.analysis.lost",
    "out_of_order": "bth.analysis.out_of_order",
    "not_captured": "bth.analysis.not_captured",
    "retry_timeout": 'bth.analysis.retry_cause == "timeout"',
    "retry_nak": 'bth.analysis.retry_cause == "nak"',
    "retry_rnr": 'bth.analysis.retry_cause == "rnr"',
    "gave_up": "bth.analysis.gave_up",
}


@pytest.mark.parametrize("name", ["capture-gap", "roce-multitenant-breach"])
def test_each_flows_finding_filter_selects_its_frames(name):
    """A conversation's listed frames of each kind are what its display filter selects in `decode -Y`, and
    each carries the per-packet field of that kind."""
    pcap = CAPS / f"{name}.pcap"
    r = run_ibwire("flows", pcap, "--format", "json")
    listed = [c for c in json.loads(r.stdout)["conversations"] if c.get("frames")]
    assert listed
    for conv in listed:
        for kind, frames_ in conv["frames"].items():
            flt = conv["wireshark"][kind]
            assert [int(f) for (f,) in _column(pcap, flt, "frame.number")] == frames_, kind
            assert [int(f) for (f,) in _column(pcap, f"({flt}) && {FLOW_KINDS[kind]}", "frame.number")] == frames_


def test_audit_one_finding_per_tenant_pair_however_many_macs(tmp_path):
    """The public NCCL capture shows one MAC per frame for one host (its mirror rewrote them): RoCE between two
    tenants is one fact, one finding, counted as tshark counts the frames each way."""
    pcap = conftest.PUBLIC / "m3_rping_uccl_uccl-mini_p2p-test2_rdma-nccl2.pcap"
    policy, tenants = tmp_path / "p.conf", tmp_path / "t.toml"
    policy.write_text("Default=0x7fff : ALL=full ;\n")
    tenants.write_text(
        '[tenants.a]\nendpoints = [{ name = "x", ip = "10.22.116.221/32" }]\n'
        '[tenants.b]\nendpoints = [{ name = "y", ip = "10.22.116.220/32" }]\n'
    )
    r = run_ibwire("audit", pcap, "--policy", policy, "--tenants", tenants, "--format", "json")
    (f,) = json.loads(r.stdout)["findings"]

    def count(src, dst):
        out = subprocess.run(
            ["tshark", "-r", str(pcap), "-Y", f"infiniband && ip.src == {src} && ip.dst == {dst}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return len(out.splitlines())

    there, back = count("10.22.116.220", "10.22.116.221"), count("10.22.116.221", "10.22.116.220")
    assert there and back
    assert f["rule"] == "roce-vlan-crossing" and f["severity"] == "breach"
    assert f"({there} packets, {back} answered back)" in f["description"]


def test_the_captures_own_drops_are_tied_to_the_gaps(tmp_path):
    """A pcapng whose interface statistics say the capture dropped packets: flows says how many of the PSNs
    not captured (capture-gap.toml declares 3) those drops explain, and that the rest were missed before it."""
    from scapy.utils import rdpcap

    from ibwire.files.writers import PcapngWriter

    packets = rdpcap(str(CAPS / "capture-gap.pcap"))
    want = sum(_truth("capture-gap")["not_captured"].values())
    for dropped in (2, 0, 10):
        out = tmp_path / f"d{dropped}.pcapng"
        w = PcapngWriter(str(out))
        w.add_interface(1, "eth0")
        for p in packets:
            w.write(bytes(p), float(p.time))
        w.statistics(0, len(packets), dropped, ts=float(packets[-1].time))
        w.close()
        stats = subprocess.run(["capinfos", str(out)], capture_output=True, text=True, check=True).stdout
        assert "Number of stat entries = 1" in stats
        doc = json.loads(run_ibwire("flows", out, "--format", "json").stdout)
        assert doc["capture"] == {"dropped": dropped, "not_captured": want, "explained": min(dropped, want)}
    said = f"2 of the {want} PSNs not captured are explained by them, the other {want - 2} was missed"
    html = tmp_path / "flows.html"
    text = run_ibwire("flows", tmp_path / "d2.pcapng", "--report", html).stdout
    assert said in text and said in html.read_text()
    assert "capture" not in json.loads(run_ibwire("flows", CAPS / "capture-gap.pcap", "--format", "json").stdout)


def _gap_capture(tmp_path, name, drops_after: dict):
    """capture-gap.pcap as a pcapng with a statistics block after the frames `drops_after` names (frame ->
    the capture's drops so far), and one at the end."""
    from scapy.utils import rdpcap

    from ibwire.files.writers import PcapngWriter

    packets = rdpcap(str(CAPS / "capture-gap.pcap"))
    out = tmp_path / name
    w = PcapngWriter(str(out))
    w.add_interface(1, "eth0")
    dropped = 0
    for n, p in enumerate(packets, 1):
        w.write(bytes(p), float(p.time))
        if n in drops_after:
            dropped = drops_after[n]
            w.statistics(0, n, dropped, ts=float(p.time))
    w.statistics(0, len(packets), dropped, ts=float(packets[-1].time))
    w.close()
    return out


def test_drops_recorded_as_they_happen_are_tied_gap_by_gap(tmp_path):
    """Statistics blocks between the packets (ibwire's verbs backend writes one each time its drop count
    rises): each rise is tied to the PSNs not captured since the block before it, with the frames after them
    and a display filter that selects those frames.  capture-gap.toml declares its gaps; tshark's capinfos
    reads the blocks."""
    gaps = _column(CAPS / "capture-gap.pcap", "bth.analysis.not_captured", "frame.number", "bth.analysis.not_captured")
    (f1, n1), (f2, n2) = [(int(a), int(b)) for a, b in gaps]
    assert n1 + n2 == sum(_truth("capture-gap")["not_captured"].values())
    cut = (f1 + f2) // 2
    out = _gap_capture(tmp_path, "live.pcapng", {cut: n1, cut + 1: n1, f2 + 3: n1 + n2 + 5})
    stats = subprocess.run(["capinfos", str(out)], capture_output=True, text=True, check=True).stdout
    assert "Number of stat entries = 4" in stats
    doc = json.loads(run_ibwire("flows", out, "--format", "json").stdout)["capture"]
    assert (doc["dropped"], doc["explained"]) == (n1 + n2 + 5, n1 + n2)
    first, second = doc["windows"]
    assert (first["first_frame"], first["last_frame"], first["dropped"], first["not_captured"]) == (1, cut, n1, n1)
    assert (second["first_frame"], second["last_frame"]) == (cut + 2, f2 + 3)
    assert (second["dropped"], second["not_captured"], second["explained"]) == (n2 + 5, n2, n2)
    assert first["gap_frames"] == [f1] and second["gap_frames"] == [f2]
    for w in (first, second):
        assert _column(out, w["wireshark"], "frame.number") == [[str(f)] for f in w["gap_frames"]]
    text = " ".join(run_ibwire("flows", out).stdout.split())
    assert f"frames 1-{cut}: {n1} dropped by the capture, {n1} PSNs not captured (after frames {f1})" in text


def test_a_capture_records_its_drops_where_they_happen_fake_backend(tmp_path):
    """The capture's poll loop with a stand-in backend (no RDMA NIC here: the verbs backend, which learns
    drops as they happen, cannot run) feeding capture-gap.pcap's frames and a drop count that rises before the
    frame after each gap: the pcapng holds a statistics block at each rise, and flows ties each to its gap."""
    from scapy.utils import rdpcap

    from ibwire.capture import session
    from ibwire.capture.sink import Sink, StatusLine

    packets = rdpcap(str(CAPS / "capture-gap.pcap"))
    gaps = _column(CAPS / "capture-gap.pcap", "bth.analysis.not_captured", "frame.number", "bth.analysis.not_captured")
    rises = {int(f): int(n) for f, n in gaps}

    class StandInBackend:
        dropped = 0

        def frames(self):
            for n, p in enumerate(packets, 1):
                self.dropped += rises.get(n, 0)  # lost just before this frame reached the capture
                yield float(p.time), bytes(p), len(p)

        def backend_drops(self):
            return self.dropped

    out = tmp_path / "standin.pcapng"
    sink = Sink(str(out), 1, "stand-in", "eth0")
    writer = session._Writer(sink, 1, 1)
    keep = session._Keep(None, None, 1, writer)
    backend = StandInBackend()
    session._poll(session.Options(write=str(out)), backend, session._Stop(), keep, StatusLine(False), sink)
    writer.close()
    sink.close(backend.backend_drops())
    doc = json.loads(run_ibwire("flows", out, "--format", "json").stdout)["capture"]
    assert [(w["dropped"], w["not_captured"], w["gap_frames"]) for w in doc["windows"]] == [
        (n, n, [f]) for f, n in sorted(rises.items())
    ]


def test_audit_filters_on_the_analysis_too():
    name = "roce-multitenant-breach"
    r = run_ibwire(
        "audit",
        CAPS / f"{name}.pcap",
        "--policy",
        CAPS / f"{name}.partitions.conf",
        "--tenants",
        CAPS / f"{name}.tenants.toml",
        "-Y",
        "bth.analysis.timeout_retransmission",
        "--format",
        "json",
    )
    doc = json.loads(r.stdout)
    assert doc["packets"] == len(_truth(name)["timeout"]) and doc["display_filter"]


@pytest.mark.parametrize("name", sorted(p.stem for p in CAPS.glob("rxe-*.pcap")))
def test_duplicates_are_what_the_kernel_counted(name):
    """The rxe lab's captures with the responder's hw_counters: its duplicate_request (absent: none) is the
    number of requests `-Y bth.analysis.duplicate` selects; go-back-N resends of what it discarded as out
    of sequence (rxe-rc-write-loss2: out_of_seq_request) are retransmissions, not duplicates."""
    counters = json.loads((CAPS / f"{name}.counters.json").read_text())["rxe_counters_delta"]
    want = sum(c.get("duplicate_request", 0) for c in counters.values())
    assert len(_column(CAPS / f"{name}.pcap", "bth.analysis.duplicate", "frame.number")) == want
    if any(c.get("out_of_seq_request") for c in counters.values()):
        assert _column(CAPS / f"{name}.pcap", "bth.analysis.retransmission", "frame.number")


def test_count_reads_only_its_frames_and_analyses_those(tmp_path):
    """`decode -c N` reads N frames and, as `tshark -c N` does, analyses those alone: its analysis fields are
    those of the same N frames saved on their own, not of the whole capture (a frame whose resend comes later
    is not `lost` yet); with -Y the whole capture is analysed (its N selected frames can lie anywhere)."""
    pcap = CAPS / "loss-retransmit.pcap"
    fields = ["frame.number", *KINDS.values(), "bth.analysis.psn_gap", "bth.analysis.acks_frame"]
    args = [a for f in fields for a in ("-e", f)]
    lost = int(_column(pcap, "bth.analysis.lost", "frame.number")[0][0])
    resent = int(_column(pcap, "bth.analysis.retransmission", "frame.number")[0][0])
    n = (lost + resent) // 2  # the loss is read, its resend is not
    head = tmp_path / "head.pcap"
    assert run_ibwire("decode", pcap, "-c", n, "-w", head).returncode == 0
    cut = run_ibwire("decode", pcap, "-c", n, "-T", "fields", *args)
    alone = run_ibwire("decode", head, "-T", "fields", *args)
    assert cut.returncode == alone.returncode == 0 and cut.stdout == alone.stdout != ""
    whole = run_ibwire("decode", pcap, "-T", "fields", *args).stdout.splitlines()[:n]
    assert cut.stdout.splitlines() != whole  # the whole capture knows more about these frames
    selected = run_ibwire("decode", pcap, "-Y", f"frame.number <= {n}", "-c", n, "-T", "fields", *args)
    assert selected.stdout.splitlines() == whole

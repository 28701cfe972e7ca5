"""`ibwire decode` behaves like tshark where a user would notice: field columns, times, hex dumps, the
summary's Protocol/Length/NAK columns, `-w`, a capture on a pipe, 64-bit JSON values, `--version`,
`-h` and shell completion.  tshark is the oracle throughout."""

import json
import os
import select
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from conftest import run_ibwire
from tshark_oracle import PUBLIC, TSHARK

from dissectors.opcodes import NAK_CODES, RNR_TIMER_MS

ROOT = Path(__file__).resolve().parents[1]
NVME = PUBLIC / "m3_nvme_nvme-discover.pcap"
CM = PUBLIC / "m3_02-2-write_ibdump_write.pcap"
LOSS = ROOT / "captures" / "loss-retransmit.pcap"
SWEEP = ROOT / "captures" / "sm-sweep.pcap"


def tshark(*args):
    return subprocess.run([TSHARK, *map(str, args)], capture_output=True, text=True, check=True).stdout


FIELDS = [
    "frame.number",
    "frame.len",
    "frame.time_epoch",
    "frame.time_delta",
    "eth.src",
    "eth.addr",
    "ip.addr",
    "udp.port",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.p_key",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.aeth.msn",
    "infiniband.deth.srcqp",
    "infiniband.mad.mgmtclass",
    "infiniband.mad.attributeid",
    "infiniband.mad.transactionid",
]


@pytest.mark.parametrize("path", [NVME, CM, LOSS], ids=lambda p: p.name)
def test_field_columns_are_tsharks(path):
    args = [a for f in FIELDS for a in ("-e", f)]
    ours = run_ibwire("decode", path, "-T", "fields", "-E", "separator=;", *args)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.splitlines() == tshark("-r", path, "-T", "fields", "-E", "separator=;", *args).splitlines()


@pytest.mark.parametrize("mode", ["r", "d", "e", "ad", "u"])
def test_time_column_is_tsharks(mode):
    width = 2 if mode == "ad" else 1  # "2017-02-21 11:54:22.290277" is two words
    ours = [l.split()[1 : 1 + width] for l in run_ibwire("decode", NVME, "-t", mode).stdout.splitlines()]
    assert ours == [l.split()[1 : 1 + width] for l in tshark("-r", NVME, "-t", mode).splitlines()]


def test_summary_columns_and_nak_kinds():
    lines = run_ibwire("decode", LOSS).stdout.splitlines()
    rows = [
        l.split("\t")
        for l in tshark("-r", LOSS, "-T", "fields", "-e", "frame.len", "-e", "infiniband.aeth.syndrome").splitlines()
    ]
    assert len(lines) == len(rows)
    naks = rnrs = 0
    for line, (length, syndrome) in zip(lines, rows):
        cols = line.split()
        assert cols[6] == length and cols[5] == "RRoCE"  # Protocol and Length, as tshark names them
        if syndrome:
            s = int(syndrome)
            kind, value = s >> 5 & 3, s & 31
            if kind == 3:
                naks += 1
                assert f"NAK {NAK_CODES[value]}" in line
            elif kind == 1:
                rnrs += 1
                assert f"RNR NAK {RNR_TIMER_MS[value]:g} ms" in line
            else:
                assert "NAK" not in line
    assert naks and rnrs


def test_hex_dump_is_tsharks():
    assert run_ibwire("decode", CM, "-x").stdout == tshark("-r", CM, "-x")


def test_verbose_tree_has_a_frame_section_and_names():
    out = run_ibwire("decode", SWEEP, "-V", "-c", "8").stdout
    assert out.count("bytes on wire") == 8 and "Arrival Time:" in out
    # tshark 4.0 leaves a MAD's class and attribute bare (0x81, 0x0015); ibwire's section names them
    assert "    [Management Class: SubnMgt directed-route (0x81)]\n" in out
    assert "    [Attribute ID: PortInfo (0x15)]\n" in out
    assert ".... ..10 = Link Next Header: 0x2" in out and "..00 .... = Pad Count: 0" in out


def test_json_carries_64_bit_values_as_hex_strings():
    objs = [json.loads(l) for l in run_ibwire("decode", CM, "-T", "jsonl").stdout.splitlines()]
    theirs = tshark(
        "-r", CM, "-T", "fields", "-e", "infiniband.mad.transactionid", "-e", "infiniband.reth.va"
    ).splitlines()
    seen = 0
    for obj, row in zip(objs, theirs):
        tid, va = (row.split("\t") + [""])[:2]
        if tid:
            assert obj["layers"]["mad"]["transactionid"] == tid
            seen += 1
        if va:
            assert obj["layers"]["reth"]["va"] == va
            seen += 1
    assert seen >= 5
    whole = json.loads(run_ibwire("decode", CM, "-T", "json").stdout)
    assert [int(o["_source"]["layers"]["frame"]["frame.number"]) for o in whole] == [o["frame"] for o in objs]
    ek = run_ibwire("decode", CM, "-T", "ek").stdout.splitlines()
    assert len(ek) == 2 * len(objs) and all("index" in json.loads(l) for l in ek[::2])


def test_ek_index_lines_are_tsharks():
    """-T ek's index lines name one index per day of the frame's local date, as tshark's do (records and
    full decode alike: ud-ipoib.pcap has IP and ARP frames), in a time zone east of UTC."""
    env = {**os.environ, "TZ": "Asia/Tokyo"}
    for cap in (ROOT / "captures" / "ud-ipoib.pcap", CM):
        ours = subprocess.run(
            [shutil.which("ibwire", path=str(Path(sys.executable).parent)), "decode", str(cap), "-T", "ek"],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
        theirs = subprocess.run(
            [TSHARK, "-r", str(cap), "-T", "ek"], capture_output=True, text=True, env=env, check=True
        ).stdout
        want = [line for line in theirs.splitlines() if line.startswith('{"index"')]
        assert [line for line in ours.splitlines() if line.startswith('{"index"')] == want and want


def test_write_keeps_the_selected_frames_and_refuses_the_input(tmp_path):
    out = tmp_path / "naks.pcap"
    r = run_ibwire("decode", LOSS, "-Y", "aeth.syndrome >= 0x20", "-w", out)
    assert r.returncode == 0 and r.stdout == "", r.stderr
    fields = ("-T", "fields", "-e", "frame.time_epoch", "-e", "frame.len", "-e", "infiniband.bth.psn")
    assert tshark("-r", out, *fields) == tshark("-r", LOSS, "-Y", "infiniband.aeth.syndrome >= 0x20", *fields)
    assert tshark("-r", out, *fields).strip()
    before = LOSS.read_bytes()
    r = run_ibwire("decode", LOSS, "-w", LOSS)
    assert r.returncode == 2 and "input" in r.stderr and LOSS.read_bytes() == before


def test_a_capture_on_a_pipe_streams():
    data = LOSS.read_bytes()
    exe = shutil.which("ibwire", path=str(Path(sys.executable).parent))
    p = subprocess.Popen([exe, "decode", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(data[:3000])  # the file header and the first packets only
    p.stdin.flush()
    ready, _, _ = select.select([p.stdout], [], [], 20)
    assert ready, "no line while the writer is still writing"
    first = p.stdout.readline().decode()
    p.stdin.write(data[3000:])
    p.stdin.close()
    rest = p.stdout.read().decode()
    assert p.wait(30) == 0
    assert [first] + rest.splitlines(keepends=True) == run_ibwire("decode", LOSS).stdout.splitlines(keepends=True)
    r = run_ibwire("decode", "-r", "-", "-T", "fields", "-e", "frame.number", input=None)
    assert r.returncode == 2  # an empty pipe is not a capture: one sentence


def test_version_help_and_completion():
    r = run_ibwire("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"ibwire {version('ibwire')}"
    r = run_ibwire("decode", "-h")
    assert r.returncode == 0 and "-Y" in r.stdout and "-w" in r.stdout
    exe = shutil.which("ibwire", path=str(Path(sys.executable).parent))
    env = dict(os.environ, _IBWIRE_COMPLETE="complete_bash", COMP_WORDS="ibwire dec", COMP_CWORD="1")
    assert subprocess.run([exe], env=env, capture_output=True, text=True).stdout.split() == ["decode"]
    r = run_ibwire("--show-completion", "bash")
    assert "_ibwire_completion" in r.stdout or r.returncode == 0


def _repeated(src: Path, dst: Path, times: int) -> Path:
    """`src`'s frames `times` over (one second later each time)."""
    from ibwire.files import iter_frames
    from ibwire.files.writers import PcapWriter

    frames = list(iter_frames(str(src)))
    with PcapWriter(str(dst), frames[0].linktype) as w:
        for k in range(times):
            for f in frames:
                w.write(f.data, f.time + k, f.wirelen, flush=False)
    return dst


@pytest.mark.parametrize(
    "args",
    [("decode", "{roce}"), ("decode", "{roce}", "-T", "jsonl"), ("convert", "{ib}", "-o", "-")],
    ids=["text", "jsonl", "convert"],
)
def test_a_reader_that_stops_early_ends_it_unsaid_with_status_2(args, tmp_path):
    """`ibwire … | head`: the reader goes away after one line.  As tshark does, ibwire stops without a
    word on standard error; its status is 2 (the output is incomplete), never 0 or click's 1."""
    roce = _repeated(LOSS, tmp_path / "roce.pcap", 40)  # megabytes of output, far beyond a pipe's buffer
    ib = _repeated(SWEEP, tmp_path / "ib.pcap", 200)
    exe = shutil.which("ibwire", path=str(Path(sys.executable).parent)) or "ibwire"
    p = subprocess.Popen(
        [exe, *(a.format(roce=roce, ib=ib) for a in args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    p.stdout.read(64)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 2, err
    assert err == ""


@pytest.mark.parametrize(
    "args",
    [
        ("decode", "{sweep}"),
        ("stats", "{loss}"),
        ("flows", "{loss}"),
        ("fabric", "{sweep}"),
        ("audit", "{clean}", "--policy", "{policy}", "--tenants", "{tenants}"),
    ],
    ids=lambda a: a[0],
)
def test_every_command_takes_tsharks_T_for_its_output_format(args):
    """One spelling of the output-format option everywhere: `-T json` (tshark's) as well as `--format json`."""
    caps = ROOT / "captures"
    argv = [
        a.format(
            sweep=SWEEP,
            loss=LOSS,
            clean=caps / "roce-multitenant-clean.pcap",
            policy=caps / "roce-multitenant-clean.partitions.conf",
            tenants=caps / "roce-multitenant-clean.tenants.toml",
        )
        for a in args
    ]
    short, long = run_ibwire(*argv, "-T", "json"), run_ibwire(*argv, "--format", "json")
    assert short.returncode == long.returncode == 0, short.stderr + long.stderr
    assert json.loads(short.stdout) == json.loads(long.stdout)


@pytest.mark.parametrize(
    "args",
    [
        ("stats",),
        ("flows",),
        ("fabric",),
        ("decode", "-T", "json"),
        ("audit", "--policy", "{policy}", "--tenants", "{tenants}"),
    ],
    ids=lambda a: a[0],
)
def test_every_command_reads_its_capture_with_tsharks_r(args):
    """`ibwire stats -r FILE` as `tshark -r FILE`: the same output as the positional capture; both at once,
    or neither, is one sentence and status 2."""
    caps = ROOT / "captures"
    cap = SWEEP if args[0] in ("fabric", "decode") else caps / "roce-multitenant-clean.pcap"
    rest = [
        a.format(
            policy=caps / "roce-multitenant-clean.partitions.conf", tenants=caps / "roce-multitenant-clean.tenants.toml"
        )
        for a in args[1:]
    ]
    fmt = [] if "-T" in rest else ["-T", "json"]
    by_r, positional = run_ibwire(args[0], "-r", cap, *rest, *fmt), run_ibwire(args[0], cap, *rest, *fmt)
    assert by_r.returncode == positional.returncode == 0, by_r.stderr + positional.stderr
    assert json.loads(by_r.stdout) == json.loads(positional.stdout)
    if args[0] != "audit":  # the audit takes several captures: -r adds one more
        both = run_ibwire(args[0], cap, "-r", cap, *rest)
        assert both.returncode == 2 and both.stderr.count("\n") == 1, both.stderr
    neither = run_ibwire(args[0], *rest)
    assert neither.returncode == 2 and "-r" in neither.stderr and "Traceback" not in neither.stderr

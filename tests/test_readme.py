"""Every README example (and docs/commands/export.md's) runs as written: each ```sh, ```python and ```sql
block, in order, in a scratch folder that holds the repository's captures/ and examples/ (and .venv, `ibwire`
on PATH).  A block may be preceded by `<!-- readme-test: exit N (why) -->` (the exit status it is meant to end with) or
`<!-- readme-test: not run here (why) -->` (set-up commands, hardware); nothing else is left out."""

import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"(?:<!-- readme-test: (?P<mark>[^>]*?) -->\n)?```(?P<lang>[\w-]*)\n(?P<body>.*?)\n```", re.S)
RUN = ("sh", "python", "sql")


PAGES = ["README.md", "docs/commands/export.md"]  # the README's examples and the API's (Python, DuckDB, Spark)


def blocks():
    out = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        out += [
            (m["lang"], m["body"], m["mark"] or "", f"{page}:{text[: m.start()].count(chr(10)) + 1}")
            for m in FENCE.finditer(text)
        ]
    return out


def test_every_readme_example_runs_as_written(tmp_path):
    for name in ("captures", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    venv = Path(sys.executable).parents[1]
    (tmp_path / ".venv").symlink_to(venv)
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    ran, con = 0, duckdb.connect()
    for lang, body, mark, line in blocks():
        if lang not in RUN:
            continue
        if mark.startswith("not run here"):
            assert re.match(r"not run here \(.+\)$", mark), f"{line}: say why the block is not run"
            continue
        want = int(re.match(r"exit (\d+) \(.+\)$", mark)[1]) if mark else 0
        where = f"{line} ({lang})"
        if lang == "sql":
            os.chdir(tmp_path)
            for stmt in body.split(";"):
                sql = "\n".join(x for x in stmt.splitlines() if not x.strip().startswith("--")).strip()
                if sql:
                    assert con.execute(sql).fetchall(), f"{where}: no rows from {sql[:60]}"
            ran += 1
            continue
        cmd = ["bash", "-euo", "pipefail", "-c", body] if lang == "sh" else [sys.executable, "-c", body]
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == want, f"{where} exited {r.returncode}:\n{body}\n{r.stdout[-1500:]}{r.stderr[-1500:]}"
        assert "Traceback" not in r.stderr, f"{where}:\n{r.stderr[-1500:]}"
        ran += 1
    assert ran >= 4

"""The storage view's latencies (NVMe-oF commands, NFS calls) are round(µs, 3) as Python rounds: to the double
nearest the decimal the exact value rounds to, half to even.  ibwire.decode.nvmematch.rounded does it with
numpy; on spans of every size, on values whose product by 1,000 lies at or next to a half, and on the
extremes it gives Python's round(v, 3), bit for bit."""

import math

import numpy as np

from ibwire.decode.nvmematch import rounded


def test_latencies_are_rounded_as_python_rounds():
    rng = np.random.default_rng(31)
    times = np.sort(rng.uniform(1.7e9, 1.7e9 + 600, 400_000))
    spans = [
        np.diff(times) * 1e6,  # µs between packets of a capture, as the view computes them
        rng.uniform(-1e4, 1e9, 400_000),
        (rng.integers(-(10**9), 10**9, 200_000) + 0.5) / 1000,  # halves of the last kept digit
        np.nextafter((rng.integers(0, 10**9, 100_000) + 0.5) / 1000, math.inf),
        np.nextafter((rng.integers(0, 10**9, 100_000) + 0.5) / 1000, -math.inf),
        np.array(
            [0.0, -0.0, 0.0005, 0.0015, 0.0025, -0.0005, 1e-300, 2.0**52, 2.0**53 + 2, 1e300, math.inf, -math.inf]
        ),
    ]
    values = np.concatenate(spans)
    assert [v.hex() for v in rounded(values)] == [round(v, 3).hex() for v in values.tolist()]

"""Transport-failure forensics for acknowledged transports (IBA Vol 1 §9.7.6): why a requester resent,
how long its local ACK timer waited, how many retries it spent, and whether it gave up.

The requester resends when a NAK (PSN sequence error, §9.7.5.2.3) or an RNR NAK asks it to, or when no
ACK comes within the local ACK timeout Ttr = 4.096 µs × 2^timeout (§9.7.6.1.3; the spec lets the real
timer run up to 4 Ttr).  It retries a PSN `retry_cnt` times (RNR NAKs: `rnr_retry`) and then fails the work
request: verbs report IBV_WC_RETRY_EXC_ERR (12, what NCCL prints as "transport retry counter exceeded")
or IBV_WC_RNR_RETRY_EXC_ERR (13).  A run of resends of one PSN with no ACK between them that ends the
conversation unanswered is that failure seen on the wire.
"""

import math
from typing import List, Optional

TTR_UNIT = 4.096e-6  # seconds: the local ACK timeout is TTR_UNIT * 2^timeout (§9.7.6.1.3)
# A wait this much short of Ttr still counts as Ttr's: timers tick (rxe arms whole jiffies, so it fires up to one
# tick early: 4 ms at HZ=250, seen 65 ms for timeout 14's 67 ms) and a mirror sees the first sending late.
EARLY = 0.9
CAUSES = ("timeout", "nak", "rnr")


def timeout_exponents(wait_min: float, wait_max: float) -> Optional[tuple]:
    """The `timeout` values (0-31) consistent with every observed wait w: EARLY x Ttr <= w <= 4 Ttr."""
    if wait_min <= 0:
        return None, None
    hi = math.floor(math.log2(wait_min / (EARLY * TTR_UNIT)))
    lo = math.ceil(math.log2(wait_max / TTR_UNIT) - 2)
    lo, hi = max(0, min(lo, hi)), min(31, max(lo, hi))
    return lo, hi


def channel(s, k: int) -> Optional[dict]:
    """Retry forensics of the requester on side k of a flow summary (flows.SUMMARY), or None."""
    ep = [int(x) for x in s["episodes"][k]]
    if not any(ep):
        return None
    out = {f"{c}_episodes": n for c, n in zip(CAUSES, ep)}
    out["max_retries"] = int(s["max_retries"][k])
    if ep[0]:
        lo, hi = timeout_exponents(float(s["timeout_wait_min"][k]), float(s["timeout_wait_max"][k]))
        out["ack_timeout"] = {
            "wait_us_min": round(float(s["timeout_wait_min"][k]) * 1e6, 3),
            "wait_us_max": round(float(s["timeout_wait_max"][k]) * 1e6, 3),
            "exponent_min": lo,
            "exponent_max": hi,
        }
    if s["stall_retries"][k]:
        out["gave_up"] = {
            "psn": f"0x{int(s['stall_psn'][k]):06x}",
            "retries": int(s["stall_retries"][k]),
            "last_frame": int(s["stall_frame"][k]),
            "answers_after": int(s["stall_answers"][k]),
            "cause": CAUSES[int(s["stall_cause"][k])],
        }
    return out


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _us(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} µs"


def paragraph(row: dict) -> List[str]:
    """One plain-language paragraph per requester of a conversation that resent anything."""
    out = []
    for side, peer, info in (("a", "b", row.get("retries_a")), ("b", "a", row.get("retries_b"))):
        if not info:
            continue
        who, other = (f"{row[x]} (QPN {row['qpn_' + x] or '?'})" for x in (side, peer))
        parts = []
        if info["timeout_episodes"]:
            t = info["ack_timeout"]
            lo, hi = t["exponent_min"], t["exponent_max"]
            exp = (
                ""
                if lo is None
                else f": local ACK timeout exponent {lo if lo == hi else f'{lo} to {hi}'}, Ttr = 4.096 µs × 2^timeout"
            )
            parts.append(
                f"{info['timeout_episodes']} after no ACK or NAK came (waits {_us(t['wait_us_min'] / 1e6)}"
                + (f" to {_us(t['wait_us_max'] / 1e6)}" if t["wait_us_max"] != t["wait_us_min"] else "")
                + f"{exp})"
            )
        if info["nak_episodes"]:
            parts.append(f"{info['nak_episodes']} after a NAK")
        if info["rnr_episodes"]:
            parts.append(f"{info['rnr_episodes']} after an RNR NAK (receiver not ready)")
        text = (
            f"#{row['conversation']} {row['transport']}: {who} resent requests to {other} "
            f"{_times(sum(info[c + '_episodes'] for c in CAUSES))}: " + "; ".join(parts) + ". "
            f"Most retries of one PSN in a row: {info['max_retries']}."
        )
        g = info.get("gave_up")
        if g:
            text += _gave_up(g, row[peer])
        out.append(text)
    return out


def _gave_up(g: dict, peer: str) -> str:
    """The sentence on a requester whose last PSN was resent to the end, by what drove the resends: RNR NAKs
    spend rnr_retry (status 13), timeouts and NAKs spend retry_cnt (status 12)."""
    said = f" It resent PSN {g['psn']} {_times(g['retries'])} with no ACK between them and the capture ends there "
    if g["cause"] == "rnr":
        return (
            said + f"(last resend: frame {g['last_frame']}): {peer} answered {_times(g['answers_after'] or 0)} more "
            "with an RNR NAK: it had no receive posted. This is how 'RNR retry counter exceeded' "
            "(IBV_WC_RNR_RETRY_EXC_ERR, status 13) looks on the wire: the rnr_retry count ran out, or the capture "
            "stopped before the requester gave up."
        )
    silent = "went silent" if not g["answers_after"] else f"answered {g['answers_after']} times without an ACK"
    return (
        said + f"(last resend: frame {g['last_frame']}): {peer} {silent}. This is how "
        "'transport retry counter exceeded' (IBV_WC_RETRY_EXC_ERR, status 12) looks on the wire: the "
        "retry count ran out, or the capture stopped before the requester gave up."
    )

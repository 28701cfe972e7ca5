"""Which subnet manager is the master when SMInfo shows more than one claiming it.

IBA Vol 1 §14.4.1.2: of two SMs the one with the higher SMInfo.Priority wins, and on equal priority the one
with the lower GUID; an SM in MASTER state that finds a master outranking it hands over and steps down.
opensm decides the same way (include/opensm/osm_sm.h osm_sm_is_greater_than(), used by
osm_state_mgr.c state_mgr_get_highest_sm() and osm_sminfo_rcv.c).  So of several MASTER claims the
winner is the master, and every other claimant is a rogue: it claims MASTER but loses the election.
"""

from typing import List, Optional, Tuple


def rank(sm: dict) -> Tuple[int, int]:
    """Sort key putting the SM that wins the election first: higher priority, then lower GUID."""
    return (-sm["priority"], sm["guid"])


def elect(seen: List[dict]) -> Tuple[Optional[dict], List[dict]]:
    """(master, rogues) among SMInfo records (dicts with guid, priority, state): the best MASTER claim and
    the other MASTER claims, best first."""
    masters = sorted((s for s in seen if s["state"] == "MASTER"), key=rank)
    return (masters[0] if masters else None), masters[1:]

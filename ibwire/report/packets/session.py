"""tshark's numbering across the frames of a capture (its single pass): UDP conversations and ERF ports."""

import numpy as np


class Session:
    """What tshark numbers across frames: UDP conversations (udp.stream, either direction) and ERF ports
    (frame.interface_id), each in order of appearance."""

    def __init__(self):
        self.streams, self.interfaces = {}, {}

    def interface(self, port: int) -> int:
        return self.interfaces.setdefault(port, len(self.interfaces))

    def note(self, src: bytes, sport: int, dst: bytes, dport: int, ns: int) -> tuple:
        """Count a UDP frame between two 16-byte addresses (IPv4 mapped): (stream, its first ns, previous ns)."""
        ends = frozenset(((src, sport), (dst, dport)))
        index, first, prev = self.streams.get(ends, (len(self.streams), ns, ns))
        self.streams[ends] = (index, first, ns)
        return index, first, prev

    def note_many(self, src: np.ndarray, sport: np.ndarray, dst: np.ndarray, dport: np.ndarray, ns: np.ndarray):
        """note() of frames in their order (addresses (n, 16) uint8): (n, 3) stream, first ns, previous ns.
        Their directions are told apart in one compiled pass (ibwire.analyze.hashing.group_rows)."""
        from ibwire.analyze.hashing import group_rows

        ends = np.zeros(len(ns), [("src", "V16"), ("sport", "u2"), ("dst", "V16"), ("dport", "u2")])
        ends["src"], ends["sport"] = np.ascontiguousarray(src).view("V16").ravel(), sport
        ends["dst"], ends["dport"] = np.ascontiguousarray(dst).view("V16").ravel(), dport
        _, first, direction = group_rows(ends, ends.dtype.names)
        index, keys, got = {}, [], []
        conversation = np.zeros(len(first), np.int64)
        for d, i in enumerate(first.tolist()):  # new conversations numbered in order of appearance
            key = frozenset(((src[i].tobytes(), int(sport[i])), (dst[i].tobytes(), int(dport[i]))))
            if key not in index:
                index[key] = len(keys)
                keys.append(key)
                got.append(self.streams.setdefault(key, (len(self.streams), int(ns[i]), int(ns[i]))))
            conversation[d] = index[key]
        got, inv = np.array(got, np.int64).reshape(-1, 3), conversation[direction]
        order = np.argsort(inv, kind="stable")
        group, when = inv[order], ns[order].astype(np.int64)
        opens = np.concatenate([[True], group[1:] != group[:-1]])
        out = got[inv]
        out[order, 2] = np.where(opens, got[group, 2], np.concatenate([[0], when[:-1]]))
        for u, last in zip(group[np.roll(opens, -1)].tolist(), when[np.roll(opens, -1)].tolist()):
            self.streams[keys[u]] = (int(got[u, 0]), int(got[u, 1]), last)
        return out

    def interface_ids(self, ports: np.ndarray) -> np.ndarray:
        """interface() of ERF ports in their order."""
        uniq, first_at, inv = np.unique(ports, return_index=True, return_inverse=True)
        ids = np.zeros(len(uniq), np.int64)
        for u in np.argsort(first_at).tolist():
            ids[u] = self.interface(int(uniq[u]))
        return ids[inv]

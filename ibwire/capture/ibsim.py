"""Capture the MADs of a simulated fabric: ibsim's UDP messages on loopback, written as native IB packets.

ibsim (Debian `ibsim-utils`) simulates the fabric; opensm and infiniband-diags reach it through
`libumad2sim.so` (LD_PRELOAD), which sends every MAD to ibsim as a UDP datagram when IBSIM_SERVER_NAME
is set (remote mode, `ibsim -r`).  An AF_PACKET socket on `lo` sees those datagrams (root or
CAP_NET_RAW needed).  Layouts and the packet built for each MAD: `ibsim_wire`.

What counts as one packet on the simulated wire:

* a client's datagram to ibsim (request or response it sends), with the two changes ibsim itself makes
  before delivering it: the client id in TID bits 63-48 of requests and the sender's LID when SLID is 0;
* ibsim's datagram to a client, unless it is the forwarded copy of a MAD already written (SA, CM ...
  between two clients) or a bounce with status 110 (ibsim could not deliver; nothing crossed a link).

When ibsim goes away (its UDP port is no longer bound: /proc/net/udp) or the disk fills, the capture stops,
the file is cut to its last complete packet and CaptureStopped says so.
"""

import socket
import struct
import threading
import time
from collections import OrderedDict
from typing import Dict, Optional

from dissectors.numbers import ETHERTYPE_IPV4, LINKTYPE_ERF, LINKTYPE_INFINIBAND, PERMISSIVE_LID
from ibwire.capture.ending import CaptureStopped, truncate_to_complete
from ibwire.capture.ibsim_wire import (
    IBSIM_DEFAULT_SERVER_PORT,
    IBSIM_MAX_CLIENTS,
    ib_packet,
    parse_ctl_port_lid,
    parse_sim_request,
    with_client_tid,
)
from ibwire.errors import UserError
from ibwire.files.writers import PcapWriter, erf_record

ETH_P_IP = ETHERTYPE_IPV4
PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_STATISTICS = 6
_RECENT = 512  # forwarded copies follow their original within a few datagrams


def _udp(ip: bytes):
    """(sport, dport, payload) of an IPv4 UDP datagram, else None."""
    if len(ip) < 28 or ip[0] >> 4 != 4 or ip[9] != 17:
        return None
    ihl = (ip[0] & 0x0F) * 4
    if struct.unpack_from(">H", ip, 6)[0] & 0x3FFF:  # fragments never occur on lo for 288-byte messages
        return None
    sport, dport, ulen = struct.unpack_from(">HHH", ip, ihl)
    return sport, dport, ip[ihl + 8 : ihl + ulen]


class IbsimConverter:
    """Turns ibsim datagrams into IB packets; keeps the per-client LIDs and PSNs this needs."""

    def __init__(self, server_port: int = IBSIM_DEFAULT_SERVER_PORT):
        self.port = server_port
        self.client_lid: Dict[int, int] = {}
        self.psn: Dict[tuple, int] = {}
        self.recent: "OrderedDict[bytes, None]" = OrderedDict()
        self.bounced = 0

    def _client(self, p: int) -> Optional[int]:
        c = p - self.port - 1
        return c if 0 <= c < IBSIM_MAX_CLIENTS else None

    def convert(self, sport: int, dport: int, payload: bytes) -> Optional[bytes]:
        """The IB packet for one UDP datagram between ibsim and a client, or None if it carries none."""
        if sport == self.port:
            got = parse_ctl_port_lid(payload)
            if got and got[1]:
                self.client_lid[got[0]] = got[1]
            return None
        to_sim, from_sim = self._client(dport), self._client(sport)
        if to_sim is None and from_sim is None:
            return None
        req = parse_sim_request(payload)
        if req is None:
            return None
        if from_sim is not None:
            if req.status:
                self.bounced += 1
                return None
            if req.dlid not in (0, PERMISSIVE_LID):
                self.client_lid[from_sim] = req.dlid
            if req.mad in self.recent:
                return None
            mad, dlid, slid = req.mad, req.dlid, req.slid
        else:
            mad = with_client_tid(req.mad, to_sim)
            dlid, slid = req.dlid, req.slid
            if req.directed_route:
                dlid = slid = PERMISSIVE_LID
            elif slid == 0:
                slid = self.client_lid.get(to_sim, 0)
            self.recent[mad] = None
            if len(self.recent) > _RECENT:
                self.recent.popitem(last=False)
        key = (slid, req.sqp)
        psn = self.psn.get(key, 0)
        self.psn[key] = psn + 1
        return ib_packet(dlid, slid, req.dqp, req.sqp, mad, psn)


def _open_lo() -> socket.socket:
    try:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
    except PermissionError:
        raise UserError(
            "capturing ibsim traffic needs root (or CAP_NET_RAW) to sniff the loopback interface; run ibwire with sudo."
        ) from None
    s.bind(("lo", ETH_P_IP))
    try:  # room for an SM sweep's burst while this thread waits for the CPU (root may exceed rmem_max)
        s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 16 << 20)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    s.settimeout(0.1)
    return s


def _kernel_drops(s: socket.socket) -> int:
    try:
        return struct.unpack("II", s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))[1]
    except OSError:
        return 0


def server_listening(port: int) -> bool:
    """A UDP socket is bound to `port` on this host (ibsim's server socket), read from /proc/net/udp{,6}."""
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    local = line.split()[1]
                    if int(local.rsplit(":", 1)[1], 16) == port:
                        return True
        except (OSError, ValueError, IndexError, StopIteration):
            continue
    return False


def _sniff(sock, writer, conv: IbsimConverter, link: str, count, end, stop) -> tuple:
    """Read `sock` and write each MAD to `writer` until `count` packets, the monotonic time `end`, `stop`,
    or a failure; (packets, bytes, failure) with failure None or why the capture stopped."""
    packets = nbytes = 0
    check = time.monotonic() + 0.5
    try:  # Ctrl-C ends the capture as --duration would
        while (
            not (stop is not None and stop.is_set())
            and (count is None or packets < count)
            and (end is None or time.monotonic() < end)
        ):
            if time.monotonic() >= check:
                check = time.monotonic() + 0.5
                if not server_listening(conv.port):
                    gone = f"the simulator ibsim (UDP port {conv.port}) went away; the capture stopped"
                    return packets, nbytes, gone
            try:
                data, addr = sock.recvfrom(65535)
            except socket.timeout:
                continue
            if addr[2] == PACKET_OUTGOING:  # lo shows each datagram twice; keep the received copy
                continue
            ts = time.time()
            udp = _udp(data)
            if udp is None:
                continue
            pkt = conv.convert(*udp)
            if pkt is None:
                continue
            try:
                writer.write(erf_record(ts, pkt) if link == "erf" else pkt, ts=ts)  # flushed per packet
            except OSError as e:
                return packets, nbytes, f"writing the capture failed ({e.strerror}); the capture stopped"
            packets += 1
            nbytes += len(pkt)
    except KeyboardInterrupt:
        pass
    return packets, nbytes, None


def capture_ibsim(
    out_path: str,
    link: str = "erf",
    count: Optional[int] = None,
    duration: Optional[float] = None,
    stop: Optional[threading.Event] = None,
    port: Optional[int] = None,
    ready: Optional[threading.Event] = None,
) -> dict:
    """Sniff ibsim's MADs on `lo` and write each as an IB packet to a pcap (ERF type 21 or link type 247).

    Stops after `count` packets, `duration` seconds, when `stop` is set, or on Ctrl-C.  `port` is ibsim's
    server port (`ibsim -l`, default 7070).  `ready` is set once the socket listens.  Returns
    {"packets", "bytes", "dropped", "bounced"}: dropped = datagrams the kernel discarded before we read
    them, bounced = MADs ibsim could not deliver (status 110, not written).
    """
    if link not in ("erf", "ib"):
        raise UserError(f"unknown link type '{link}' for the ibsim backend; use 'erf' (default) or 'ib'.")
    server = IBSIM_DEFAULT_SERVER_PORT if port is None else port
    if not server_listening(server):
        raise UserError(
            f"no ibsim listens on UDP port {server}; start the simulator (ibsim -r) first, or set "
            f"IBSIM_SERVER_PORT to its port"
        )
    conv = IbsimConverter(server)
    sock = _open_lo()
    try:
        writer = PcapWriter(out_path, LINKTYPE_ERF if link == "erf" else LINKTYPE_INFINIBAND, nanos=False)
    except OSError as e:
        sock.close()
        raise UserError(f"cannot write {out_path}: {e.strerror}; choose a writable path.") from None
    if ready is not None:
        ready.set()
    end = None if duration is None else time.monotonic() + duration
    failure = None
    try:
        packets, nbytes, failure = _sniff(sock, writer, conv, link, count, end, stop)
    finally:
        dropped = _kernel_drops(sock)
        sock.close()
        try:
            writer.close()
        except OSError as e:
            failure = failure or f"writing the capture failed ({e.strerror}); the capture stopped"
    if failure:
        if isinstance(out_path, str):
            packets = truncate_to_complete(out_path)[0]
        raise CaptureStopped(
            f"{failure}; {packets:,} complete packets kept in "
            f"{out_path if isinstance(out_path, str) else 'standard output'}"
        )
    return {"packets": packets, "bytes": nbytes, "dropped": dropped, "bounced": conv.bounced}

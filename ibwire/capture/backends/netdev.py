"""`netdev` backend: AF_PACKET capture on any interface the kernel sees (IPoIB, Soft-RoCE, veth, host VF).

VLAN tags the driver stripped are put back from PACKET_AUXDATA (linux/if_packet.h: tpacket_auxdata);
drops come from PACKET_STATISTICS.
"""
import socket
import struct
import time

from ...errors import UserError
from ...writers import LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL

SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_AUXDATA = 8
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
ARPHRD_ETHER = 1


class AfPacket:
    name = "netdev"

    def __init__(self, iface: str, outgoing: bool = True):
        self.iface, self.outgoing = iface, outgoing
        self.drops = 0
        try:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        except PermissionError:
            raise UserError("capturing on a netdev needs CAP_NET_RAW; run ibwire capture as root")
        try:
            s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
            s.bind((iface, ETH_P_ALL))
        except OSError as e:
            s.close()
            raise UserError(f"cannot capture on interface {iface!r} ({e.strerror}); `ip link` lists the interfaces")
        s.settimeout(0.2)
        self.sock = s
        self._anc = socket.CMSG_SPACE(struct.calcsize("IIIHHHH"))
        self.hatype = s.getsockname()[3]
        self.linktype = LINKTYPE_ETHERNET if self.hatype == ARPHRD_ETHER else LINKTYPE_LINUX_SLL

    def frames(self):
        while True:
            try:
                f = self._read()
            except socket.timeout:
                yield None
                continue
            except OSError:
                return
            if f:
                yield f

    def finish(self, quiet: float = 0.05, limit: float = 1.0):
        """After a stop: the frames still queued or in flight, until none came for `quiet` s (at most `limit` s
        on a busy link)."""
        self.sock.settimeout(quiet)
        end = time.monotonic() + limit
        while time.monotonic() < end:
            try:
                f = self._read()
            except OSError:   # socket.timeout included: the link went quiet
                return
            if f:
                yield f

    def _read(self):
        """One frame as (time, bytes, wire length), or None for one this capture skips (our own sends)."""
        data, ancdata, _flags, addr = self.sock.recvmsg(262144, self._anc)
        ts = time.time()
        pkttype = addr[2]
        if pkttype == PACKET_OUTGOING and not self.outgoing:
            return None
        for level, typ, cdata in ancdata:
            if level == SOL_PACKET and typ == PACKET_AUXDATA and len(cdata) >= 20:
                status, _len, _snap, _mac, _net, tci, tpid = struct.unpack_from("IIIHHHH", cdata)
                if status & TP_STATUS_VLAN_VALID and self.hatype == ARPHRD_ETHER:
                    tpid = tpid if status & TP_STATUS_VLAN_TPID_VALID else 0x8100
                    data = data[:12] + struct.pack(">HH", tpid, tci) + data[12:]
        if self.linktype == LINKTYPE_LINUX_SLL:
            hw = addr[4][:8]
            data = struct.pack(">HHH", pkttype, self.hatype, len(hw)) + hw.ljust(8, b"\0") + \
                struct.pack(">H", addr[1]) + data
        return ts, data, len(data)

    def backend_drops(self) -> int:
        try:
            _pk, drops = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
            self.drops += drops
        except OSError:
            pass
        return self.drops

    def close(self):
        self.backend_drops()
        self.sock.close()

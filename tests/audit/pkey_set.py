"""Write one P_KeyTable block with a LID-routed SubnSet through libibumad, behind opensm's back.

Run under LD_PRELOAD=libumad2sim.so so the MAD goes to ibsim.  No infiniband-diags tool sets a P_Key
table, so the tests send this one SMP themselves (IBA 14.2.5.7 P_KeyTable, 13.4 MAD header).
Usage: python pkey_set.py LID BLOCK PKEY [PKEY ...] [--port N]
"""

import ctypes
import struct
import sys


def main(argv):
    port = 0
    if "--port" in argv:
        i = argv.index("--port")
        port = int(argv[i + 1], 0)
        del argv[i : i + 2]
    lid, block = int(argv[0], 0), int(argv[1], 0)
    pkeys = [int(x, 0) for x in argv[2:]][:32]
    lib = ctypes.CDLL("libibumad.so.3")
    if lib.umad_init() < 0:
        sys.exit("umad_init failed")
    fd = lib.umad_open_port(None, 0)
    if fd < 0:
        sys.exit("umad_open_port failed")
    agent = lib.umad_register(fd, 0x01, 1, 0, None)
    if agent < 0:
        sys.exit("umad_register failed")
    size = lib.umad_size()
    buf = ctypes.create_string_buffer(size + 256)
    lib.umad_get_mad.restype = ctypes.c_void_p
    mad_addr = lib.umad_get_mad(buf)
    header = struct.pack(
        ">BBBBHHQHHI", 1, 0x01, 1, 0x02, 0, 0, 0x1234ABCD, 0x0016, 0, (port << 16) | block if port else block
    )
    data = struct.pack(">32H", *(pkeys + [0] * (32 - len(pkeys))))
    mad = header + bytes(8) + bytes(32) + data + bytes(128)
    ctypes.memmove(mad_addr, mad, 256)
    lib.umad_set_addr(buf, lid, 0, 0, 0)
    if lib.umad_send(fd, agent, buf, 256, 1000, 2) < 0:
        sys.exit("umad_send failed")
    length = ctypes.c_int(256)
    rc = lib.umad_recv(fd, buf, ctypes.byref(length), 2000)
    if rc < 0:
        sys.exit("no SubnGetResp to the SubnSet")
    resp = ctypes.string_at(mad_addr, 256)
    status = struct.unpack(">H", resp[4:6])[0]
    if resp[3] != 0x81 or status & 0x7FFF & ~1:
        sys.exit(f"SubnSet refused: method 0x{resp[3]:02x} status 0x{status:04x}")
    print("set", " ".join(f"0x{p:04x}" for p in pkeys))


if __name__ == "__main__":
    main(sys.argv[1:])

MEMORY = {}


class MR:
    def __init__(self, pd, length, access):
        self.mem = bytearray(length)
        self.buf, self.lkey = 0x10000, 7
        MEMORY["mr"] = self

    def read(self, length, offset):
        return bytes(self.mem[offset:offset + length])

    def close(self):
        pass

class SGE:
    def __init__(self, addr, length, lkey):
        self.addr, self.length = addr, length


class RecvWR:
    def __init__(self, wr_id=0, num_sge=1, sg=None):
        self.wr_id, self.sg = wr_id, sg

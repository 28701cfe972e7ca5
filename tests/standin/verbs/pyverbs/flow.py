class FlowAttr:
    def __init__(self, **kw):
        pass


class Flow:
    def __init__(self, qp, attr):
        pass

    def close(self):
        pass

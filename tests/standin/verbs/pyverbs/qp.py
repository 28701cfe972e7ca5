POSTED = []


class QPCap:
    def __init__(self, **kw):
        pass


class QPInitAttr:
    def __init__(self, **kw):
        pass


class QPAttr:
    def __init__(self, **kw):
        pass


class QP:
    def __init__(self, pd, init_attr, attr):
        pass

    def post_recv(self, wr):
        POSTED.append(wr)

    def close(self):
        pass

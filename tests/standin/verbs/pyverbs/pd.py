class PD:
    def __init__(self, ctx):
        pass

    def close(self):
        pass

"""-V's hex dumps of Data items: the tree's marker lines turned into tshark's dump (native/dump.c)."""

DUMP_MARK = "\x01"  # a line of the data's bytes in hex, for native/dump.c (its DUMP_MARK)


class Dumps:
    """-V text with its marker lines turned into tshark's hex dumps (native/dump.c), written to a buffer kept
    from one batch to the next: the view returned holds until the next call (a text without markers is returned
    as it is)."""

    def __init__(self):
        self.buf = bytearray()

    def __call__(self, text: bytes, show: bool = True):
        from ibwire.decode._native import dumps

        if DUMP_MARK.encode() not in text:  # no Data item (a MAD's tree): the text as it is
            return text
        n = dumps(text, show, self.buf)
        if n < 0:
            self.buf = bytearray(-n * 11 // 10)
            n = dumps(text, show, self.buf)
        return memoryview(self.buf)[:n]

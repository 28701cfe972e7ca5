"""Run a producer of batches on a second thread, ahead of its consumer.

The compiled walk, decoder and CRC checks release the GIL, as do file reads and pyarrow's Parquet encoder,
so a producer thread (read and decode) and its consumer (print, analyse, encode) overlap.
"""

import queue
import threading
import weakref
from typing import Iterable, Iterator


def read_ahead(items: Iterable, depth: int = 1) -> Iterator:
    """The items of `items`, produced on a second thread up to `depth` ahead of the consumer.  The thread
    starts now, before the first item is asked for (so that work the consumer does first, such as
    importing pyarrow, overlaps the first reads); its exceptions are raised in the consumer; a consumer
    that stops early stops the producer."""
    q: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    done = object()
    items = iter(items)

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def produce():
        try:
            for b in items:
                if not put((b, None)):
                    return
            put((done, None))
        except BaseException as e:  # noqa: B036  (handed to the consumer, which raises it)
            put((done, e))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    t = threading.Thread(target=produce, name="ibwire-read-ahead", daemon=True)
    t.start()

    def consume():
        try:
            while True:
                item, err = q.get()
                if item is done:
                    if err is not None:
                        raise err
                    return
                yield item
        finally:
            stop.set()
            t.join()

    items_out = consume()
    weakref.finalize(items_out, stop.set)  # also when the consumer never starts: the producer ends
    return items_out

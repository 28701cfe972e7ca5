"""Run a producer of batches on a second thread, ahead of its consumer.

The compiled walk, decoder and CRC checks release the GIL, as do file reads and pyarrow's Parquet encoder,
so a producer thread (read and decode) and its consumer (print, analyse, encode) overlap.
"""

import os
import queue
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator


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


MAX_WORKERS = 2  # the one reading thread feeds no more (and each batch ahead holds its chunks and records)


def map_ahead(work: Callable, items: Iterable, workers: int = 0) -> Iterator:
    """work(item) for each item of `items`, in order, computed ahead of the consumer by `workers` threads
    (0: one per CPU this process may use, at most MAX_WORKERS): `items` is iterated on a thread of its own
    (reads are sequential), each item handed to the pool; at most 2 * workers results wait.  Worth it where `work` releases the GIL
    (the compiled decoder and CRC checks do).  Errors are raised in the consumer, as read_ahead raises them."""
    workers = workers or min(len(os.sched_getaffinity(0)), MAX_WORKERS)
    if workers < 2:
        return read_ahead(map(work, items))
    pool = ThreadPoolExecutor(workers, thread_name_prefix="ibwire-work")
    futures = read_ahead((pool.submit(work, item) for item in items), depth=2 * workers)

    def results():
        try:
            for f in futures:
                yield f.result()
        finally:
            futures.close()
            pool.shutdown(cancel_futures=True)

    return results()

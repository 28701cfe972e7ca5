"""The columns every storage request row shares, NVMe-oF command or RPC call alike: the submission frame,
the RDMA READ/WRITE frames that moved its data, the completion (or reply) and its latency, the bytes."""


def transfer_columns(frame: int, time: float, data: list, done, done_time, nbytes: int) -> dict:
    """`done` is the completion's frame (None while none was seen), `done_time` its time."""
    return {
        "submission": frame,
        "data_frames": len(data),
        "first_data": data[0] if data else None,
        "last_data": data[-1] if data else None,
        "completion": done,
        "latency_us": round((done_time - time) * 1e6, 3) if done else None,
        "bytes": nbytes,
    }

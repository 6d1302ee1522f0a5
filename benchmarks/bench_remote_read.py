"""Reading a .nvdb file from an S3 endpoint by byte ranges, against the same file read locally (memory map).

    python benchmarks/bench_remote_read.py [--mb 100] [--repeat 5] [--dir /tmp]

The endpoint is moto's S3 server on 127.0.0.1 (the tests' object store): no network, no real store's
latency or bandwidth, so the times say what the reader itself costs, not what S3 would.  Printed per
case: the bytes read against the file's size, the requests and rounds, and the best time of each side.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys

import numpy as np
from bench_nvdb_read import build_volume
from timing import best_of

import vdbflow


def _moto() -> tuple[object, dict]:
    from moto.server import ThreadedMotoServer

    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, {"endpoint_url": f"http://127.0.0.1:{port}", "key": "bench", "secret": "bench"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default="/tmp")
    args = ap.parse_args()
    import logging

    import boto3

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    path = os.path.join(args.dir, "vdbflow-bench-remote.nvdb")
    vol = build_volume(args.mb)
    vdbflow.save(path, {"velocity": vol})
    server, options = _moto()
    try:
        client = boto3.client("s3", endpoint_url=options["endpoint_url"], region_name="us-east-1")
        client.create_bucket(Bucket="vdbflow-bench")
        with open(path, "rb") as f:
            client.put_object(Bucket="vdbflow-bench", Key="field.nvdb", Body=f.read())
        url = "s3://vdbflow-bench/field.nvdb"
        n = vol.leaf_count
        rng = np.random.default_rng(1)
        cases = {
            "whole grid": {},
            "1% of the leaves (scattered)": {"leaves": np.sort(rng.choice(n, max(1, n // 100), replace=False))},
            "10% of the leaves (contiguous)": {"leaves": np.arange(n // 10)},
            "half the leaves (a partition)": {"leaves": np.arange(n // 2)},
            "a 64^3 box": {"bbox": ((0, 0, 0), (63, 63, 63))},
        }
        rows = []
        for name, kw in cases.items():
            remote = vdbflow.open(url, storage_options=options, **kw)
            local = vdbflow.open(path, **kw)
            assert np.array_equal(np.asarray(remote.active_values()), np.asarray(local.active_values()))
            t_local = best_of(lambda kw=kw: np.asarray(vdbflow.open(path, **kw).active_values()).sum(), args.repeat)
            t_remote = best_of(
                lambda kw=kw: np.asarray(vdbflow.open(url, storage_options=options, **kw).active_values()).sum(),
                args.repeat,
            )
            s = remote.read_stats
            rows.append(
                {
                    "case": name,
                    "leaves": remote.leaf_count,
                    "bytes_read": s.bytes_read,
                    "file_bytes": s.file_size,
                    "fraction": round(s.fraction, 4),
                    "requests": s.requests,
                    "rounds": s.rounds,
                    "local_s": round(t_local, 4),
                    "moto_s": round(t_remote, 4),
                    "ratio": round(t_remote / t_local, 1),
                }
            )
        infos, stats = vdbflow.io.volumes.list_grids_read(url, options)
        rows.append({"case": "list_grids", "bytes_read": stats.bytes_read, "file_bytes": stats.file_size})
        json.dump(rows, sys.stdout, indent=1)
        print()
    finally:
        server.stop()
        os.remove(path)


if __name__ == "__main__":
    main()

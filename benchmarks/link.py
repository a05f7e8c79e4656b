"""A TCP proxy that models the link between a rented machine and an object store: each
connection carries at most `rate` bytes/s toward the client, and each request waits
`latency` seconds for its first byte. Run as its own process (it prints its port), so
its relaying takes no time from the reader measured:

    python -m benchmarks.link --target 9000 --rate 64e6 --latency 0.02

The figures are S3's documented shape, not a measurement of it: a single GET stream
reaches tens of MB/s, more come from parallel range requests ("Performance design
patterns for Amazon S3": "scale ... by using parallel connections"), and the first byte
of a request takes tens of milliseconds.
"""

from __future__ import annotations

import argparse
import select
import socket
import sys
import threading
import time

CHUNK = 64 << 10


def _relay(client: socket.socket, target: tuple[str, int], rate: float, latency: float) -> None:
    upstream = socket.create_connection(target)
    first_byte_at = 0.0  # a request's answer waits until then
    sent_at, budget = time.monotonic(), 0.0
    try:
        while True:
            readable, _, _ = select.select([client, upstream], [], [])
            if client in readable:
                data = client.recv(CHUNK)
                if not data:
                    return
                first_byte_at = time.monotonic() + latency
                upstream.sendall(data)
            if upstream in readable:
                data = upstream.recv(CHUNK)
                if not data:
                    return
                wait = first_byte_at - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                    sent_at, budget = time.monotonic(), 0.0
                # A token bucket refilled at `rate`, at most one chunk's burst.
                now = time.monotonic()
                budget = min(CHUNK, budget + (now - sent_at) * rate) - len(data)
                sent_at = now
                if budget < 0:
                    time.sleep(-budget / rate)
                client.sendall(data)
    except OSError:
        return
    finally:
        client.close()
        upstream.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=int, required=True, help="the store's port")
    parser.add_argument("--rate", type=float, required=True, help="bytes/s per connection")
    parser.add_argument("--latency", type=float, required=True, help="seconds to a first byte")
    args = parser.parse_args()
    server = socket.create_server(("127.0.0.1", 0))
    print(server.getsockname()[1], flush=True)
    while True:
        client, _ = server.accept()
        threading.Thread(
            target=_relay,
            args=(client, ("127.0.0.1", args.target), args.rate, args.latency),
            daemon=True,
        ).start()


if __name__ == "__main__":
    sys.exit(main())

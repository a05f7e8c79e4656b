"""A TCP proxy on 127.0.0.1 that can stop relaying on command: a store that hangs.

While paused it still accepts connections but forwards nothing either way, as a dead
load balancer or a black-holed route does: the client waits until its own timeout.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class HangingProxy:
    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._relaying = threading.Event()
        self._relaying.set()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> HangingProxy:
        self._spawn(self._accept)
        return self

    def pause(self) -> None:
        """From now on, accept but relay nothing (connections already open stall too)."""
        self._relaying.clear()

    def stop(self) -> None:
        self._stopped.set()
        self._relaying.set()
        with contextlib.suppress(OSError):
            self._server.close()

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if not self._relaying.is_set():
                self._spawn(self._hold, client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            self._spawn(self._relay, client, upstream)

    def _hold(self, client: socket.socket) -> None:
        """Keep the connection open and silent until the proxy stops."""
        self._stopped.wait()
        client.close()

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        pair = {client: upstream, upstream: client}
        try:
            while not self._stopped.is_set():
                readable, _, _ = select.select(list(pair), [], [], 0.1)
                if not self._relaying.is_set():
                    self._stopped.wait()  # stall: read nothing, send nothing
                    return
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    pair[sock].sendall(data)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()

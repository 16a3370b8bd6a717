"""A TCP relay that can be cut off silently, as a network partition cuts a client off its API
server: while cut, connections are accepted (the kernel completes the handshake) and nothing
passes either way, nothing is refused or reset, so the client's requests hang until its own
timeout. What was sent meanwhile passes once healed, as TCP's retransmissions deliver it."""

from __future__ import annotations

import contextlib
import socket
import threading

_ACCEPT_POLL = 0.1  # how soon the accepting thread notices close()


class Partition:
    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_ACCEPT_POLL)
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._closed = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, name="partition", daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    def close(self) -> None:
        """Cut every connection and stop; waits for its threads."""
        with self._lock:
            self._closed = True
            sockets, threads = list(self._sockets), list(self._threads)
        self._open.set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join()
        for sock in sockets:
            sock.close()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            try:
                upstream = socket.create_connection(self._upstream)
            except OSError:  # the API server is down: so is the relayed connection
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
                for source, target in ((client, upstream), (upstream, client)):
                    pump = threading.Thread(target=self._pump, args=(source, target), daemon=True)
                    self._threads.append(pump)
                    pump.start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._open.wait()  # held while cut
                if self._closed:
                    break
                target.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)

"""A TCP forwarder on 127.0.0.1 that can be repointed, as DNS or a Service is in a failover.

Connections made before :meth:`TcpProxy.repoint` keep reaching the old
target; new ones reach the new target. That is what an application sees when
its Redis address moves to a newly promoted primary while the old primary,
demoted to a replica, keeps its connections open.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def repoint(self, target_port: int) -> None:
        """Send new connections to ``target_port``; open ones stay where they are."""
        self.target_port = target_port

    def close(self) -> None:
        """Stop accepting, close every connection and wait for the threads."""
        self._closed = True
        # Closing alone would not wake the thread blocked in accept() (Linux):
        # shutting the listener down does, so its join below does not wait.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
        for thread in self._threads:
            thread.join(5)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=1)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                thread = threading.Thread(target=self._pump, args=(source, sink), daemon=True)
                self._threads.append(thread)
                thread.start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

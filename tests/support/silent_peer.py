"""A loopback peer that accepts TCP connections and never answers: the "silent apiserver"."""

from __future__ import annotations

import socket
import threading
from pathlib import Path


class SilentPeer:
    """Accepts connections and holds them open without a byte until ``close()``."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="silent-peer", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed
            self.accepted.append(connection)

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "silent-kubeconfig.yaml"
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f'clusters: [{{name: silent, cluster: {{server: "http://127.0.0.1:{self.port}"}}}}]\n'
            "users: [{name: u, user: {token: not-a-real-token}}]\n"
            "contexts: [{name: silent, context: {cluster: silent, user: u}}]\n"
            "current-context: silent\n"
        )
        return path

    def close(self) -> None:
        self._listener.close()
        for connection in self.accepted:
            connection.close()

    def __enter__(self) -> SilentPeer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

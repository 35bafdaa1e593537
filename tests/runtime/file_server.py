"""A local HTTP file server for the download tests (127.0.0.1, a free port, a thread): serves a directory with
HTTP Range requests (206 Partial Content), which http.server's own handler does not, and records the requests
(path, Range header) so a test can see what was asked for. `break_after` closes a response after so many bytes
(a dropped connection); `ignore_range` answers every request with the whole file (200)."""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class FileServer:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.requests: list[tuple[str, str | None]] = []
        self.break_after: int | None = None
        self.ignore_range = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.requests.append((self.path, self.headers.get("Range")))
                file = server.root / self.path.lstrip("/")
                if not file.is_file():
                    self.send_error(404)
                    return
                data = file.read_bytes()
                start = 0
                match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                if match and not server.ignore_range:
                    start = int(match.group(1))
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if server.break_after is not None:
                    body = body[:server.break_after]
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client stopped reading (a refused download)
                    pass

        class Quiet(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

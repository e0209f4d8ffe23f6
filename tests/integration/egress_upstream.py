#!/usr/bin/env python3
"""The upstream servers of the egress tests (tests/integration/it_egress.h)
and benchmarks (bench/netns.sh), run inside the upstream namespace those
make. For each NAME=ADDR given: HTTP on ADDR:80, HTTPS on ADDR:443 (CERT,
KEY), a server-speaks-first banner on ADDR:2222 and a UDP sink on
ADDR:9999. Every answer names who answers ("I am NAME at ADDR"), so a test
sees which server a connection reached; GET /size/N answers N bytes.
Every connection and datagram is a line of DIR/log; DIR/ready appears once
every socket listens."""
import os
import socket
import socketserver
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler

LOCK = threading.Lock()
CHUNK = b"x" * (1 << 20)
FILE_SIZE = 16 << 20  # the chunk file sendfile(2) sends from


def log(dirname, line):
    with LOCK, open(os.path.join(dirname, "log"), "a") as f:
        f.write(line + "\n")


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def handler(name, addr, port, dirname):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            sni = getattr(self.connection, "sni_seen", None) or "-"
            host = self.headers.get("Host", "-")
            log(dirname, f"http {addr}:{port} name={name} host={host} sni={sni} path={self.path}")
            if self.path.startswith("/size/"):
                self.send_size(int(self.path[6:]))
                return
            body = f"I am {name} at {addr} host={host} sni={sni}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def send_size(self, n):
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            self.wfile.flush()
            if port == 80:  # plain: sendfile(2) of the chunk file, no copy
                with open(os.path.join(dirname, "chunk"), "rb") as f:
                    while n > 0:
                        n -= self.connection.sendfile(f, 0, min(n, FILE_SIZE))
                return
            view = memoryview(CHUNK)
            while n > 0:
                k = min(n, len(CHUNK))
                self.wfile.write(view[:k])
                n -= k

    return H


class TCP(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, addr, port, h, tls=None):
        self.address_family = family(addr)
        self.tls = tls
        super().__init__((addr, port), h)

    def get_request(self):
        conn, peer = super().get_request()
        if self.tls:
            # The handshake runs on the handler's thread (first read), so
            # a slow client holds nobody else.
            conn = self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        return conn, peer


def tls_context(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)

    def sni(sock, name, _ctx):
        sock.sni_seen = name

    ctx.sni_callback = sni
    return ctx


def banner(name, addr, dirname):
    class B(socketserver.BaseRequestHandler):
        def handle(self):
            log(dirname, f"tcp {addr}:2222 name={name}")
            self.request.sendall(f"SSH-2.0-I am {name} at {addr}\r\n".encode())

    return B


def udp_sink(name, addr, dirname):
    s = socket.socket(family(addr), socket.SOCK_DGRAM)
    s.bind((addr, 9999))

    def run():
        while True:
            data, peer = s.recvfrom(65536)
            log(dirname, f"udp {addr}:9999 name={name} from={peer[0]} len={len(data)}")

    return run


def main():
    dirname, cert, key = sys.argv[1:4]
    ctx = tls_context(cert, key)
    with open(os.path.join(dirname, "chunk"), "wb") as f:
        for _ in range(FILE_SIZE // len(CHUNK)):
            f.write(CHUNK)
    loops = []
    for spec in sys.argv[4:]:
        name, addr = spec.split("=", 1)
        loops.append(TCP(addr, 80, handler(name, addr, 80, dirname)).serve_forever)
        loops.append(TCP(addr, 443, handler(name, addr, 443, dirname), ctx).serve_forever)
        loops.append(TCP(addr, 2222, banner(name, addr, dirname)).serve_forever)
        loops.append(udp_sink(name, addr, dirname))
    for run in loops:
        threading.Thread(target=run, daemon=True).start()
    open(os.path.join(dirname, "ready"), "w").close()
    threading.Event().wait()


if __name__ == "__main__":
    main()

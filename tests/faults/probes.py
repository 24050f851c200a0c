"""Plain-socket programs that test_netns.py runs inside namespaces to see what a fault does.

    python probes.py tcp-echo  --port P                          echo every connection back
    python probes.py tcp-client --to H:P [--every S] [--stall S] one numbered line per round trip
    python probes.py udp-sink  --port P [--idle S]               count datagrams until S s without one
    python probes.py udp-burst --to H:P --count N                send N datagrams, a little paced
    python probes.py tcp-sink  --port P                          read one connection to its end
    python probes.py tcp-bulk  --to H:P --bytes N                send N bytes, then end the stream

Each prints JSON lines, flushed: {"listening": P} once a server listens; the client {"echo": n, "rtt": s}
per round trip, {"stalled": n} when an answer takes longer than --stall s (it keeps waiting), and
{"error": class, "errno": e} when the connection fails (then exits 3); the sinks {"received": count,
"seconds": s from the first byte or datagram to the end}; the senders {"sent": count}.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def split(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def tcp_echo(args) -> None:
    server = socket.create_server(("0.0.0.0", args.port))
    say(listening=args.port)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()


def echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


def tcp_client(args) -> None:
    sock = socket.create_connection(split(args.to), timeout=10)
    sock.settimeout(args.stall)
    try:
        for n in range(1, 1 << 30):
            line, start = f"{n:08d}\n".encode(), time.monotonic()
            sock.sendall(line)
            answer = b""
            while len(answer) < len(line):
                try:
                    chunk = sock.recv(len(line) - len(answer))
                except socket.timeout:
                    say(stalled=n)
                    continue
                if not chunk:
                    return say(closed=n)
                answer += chunk
            if answer != line:
                return say(error="mismatch", sent=line.decode(), got=answer.decode())
            say(echo=n, rtt=time.monotonic() - start)
            time.sleep(args.every)
    except OSError as exc:
        say(error=type(exc).__name__, errno=exc.errno)
        raise SystemExit(3) from None


def udp_sink(args) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE (root)
    sock.bind(("0.0.0.0", args.port))
    say(listening=args.port)
    count, first = 0, None
    while True:
        sock.settimeout(None if first is None else args.idle)
        try:
            sock.recv(2048)
        except socket.timeout:
            return say(received=count, seconds=last - first)
        last = time.monotonic()
        first = first or last
        count += 1


def udp_burst(args) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for n in range(args.count):
        sock.sendto(n.to_bytes(8, "big") * 8, split(args.to))
        if n % 50 == 49:
            time.sleep(0.002)  # pacing: stay under the kernel's per-CPU backlog of 1000 packets
    say(sent=args.count)


def tcp_sink(args) -> None:
    server = socket.create_server(("0.0.0.0", args.port))
    say(listening=args.port)
    conn, _ = server.accept()
    total, first = 0, None
    while chunk := conn.recv(1 << 16):
        first = first or time.monotonic()
        total += len(chunk)
    say(received=total, seconds=time.monotonic() - first)


def tcp_bulk(args) -> None:
    sock = socket.create_connection(split(args.to), timeout=60)
    block = bytes(1 << 16)
    sent = 0
    while sent < args.bytes:
        sent += sock.send(block[: args.bytes - sent])
    sock.shutdown(socket.SHUT_WR)
    sock.recv(1)  # the sink's end of stream: everything was read
    say(sent=sent)


ROLES = {"tcp-echo": tcp_echo, "tcp-client": tcp_client, "udp-sink": udp_sink, "udp-burst": udp_burst,
         "tcp-sink": tcp_sink, "tcp-bulk": tcp_bulk}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=list(ROLES))
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--to", default="")
    parser.add_argument("--every", type=float, default=0.05)
    parser.add_argument("--stall", type=float, default=1.0)
    parser.add_argument("--idle", type=float, default=1.0)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--bytes", type=int, default=1 << 20)
    args = parser.parse_args()
    ROLES[args.role](args)


if __name__ == "__main__":
    main()

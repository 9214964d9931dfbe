#!/usr/bin/env python3
"""Plays strangers against a Tessera node's port (a `tessera ps`, a coordinator): each variant
opens a connection and sends what anyone who can reach the port could send — a forged BASP
header announcing gigabytes, garbage, a TLS hello to a plain node, a valid BASP handshake
followed by a huge message, nothing at all — and checks that the node closes the connection
within a bound instead of waiting for (and allocating) what the bytes announce, or holding the
connection forever. Prints one line per variant; exits non-zero naming each variant whose
connection the node kept open.

  hostile_peer.py PORT [HANDSHAKE_TIMEOUT_S]

HANDSHAKE_TIMEOUT_S (10: the nodes' default) bounds the silent variants: a connection whose
peer never completes the version handshake must be closed within it (plus a margin).
"""
import os
import random
import socket
import struct
import sys
import threading
import time

# BASP 0.17 (caf/io/basp/header.hpp): op, 2 padding bytes, flags, payload length, operation
# data, source and destination actor ids; network byte order.
CLIENT_HANDSHAKE, DIRECT_MESSAGE = 1, 2


def header(op, payload_len, dest=0):
    return struct.pack(">BBBBIQQQ", op, 0, 0, 0, payload_len, 0, 0, dest)


def atom(text):
    """CAF 0.17's atom_value of `text` (caf/detail/atom_val.hpp)."""
    table = " 0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
    value = 0xF
    for c in text:
        value = (value << 6) | table.index(c)
    return value


# A client handshake as CAF writes it: the sender's node id (implementation "default", a
# process id, a 20-byte host id).
NODE_ID = struct.pack(">QI", atom("default"), os.getpid()) + bytes(range(20))
CLIENT_HELLO = header(CLIENT_HANDSHAKE, len(NODE_ID)) + NODE_ID
GARBAGE = random.Random(1).randbytes(64 << 10)

VARIANTS = [
    ("a forged handshake header announcing 4 GiB", header(CLIENT_HANDSHAKE, 0xFFFFFFF0)),
    ("a forged message header announcing 3 GiB", header(DIRECT_MESSAGE, 3 << 30, dest=1)),
    ("64 KiB of garbage", GARBAGE),
    ("a TLS client hello", bytes([0x16, 0x03, 0x01, 0x00, 0xF0]) + bytes(240)),
    ("a valid BASP handshake, then a message announcing 3 GiB",
     CLIENT_HELLO + header(DIRECT_MESSAGE, 3 << 30, dest=1)),
    ("a valid BASP handshake, then a message of 1 MiB before the version handshake",
     CLIENT_HELLO + header(DIRECT_MESSAGE, 1 << 20, dest=1)),
]
SILENT_VARIANTS = [
    ("a connection that sends nothing", b""),
    ("half a BASP header, then nothing", header(CLIENT_HANDSHAKE, 40)[:16]),
    ("a valid BASP handshake, then nothing", CLIENT_HELLO),
]


def closed_within(port, payload, seconds):
    """Sends `payload` and waits until the node closes the connection; how long that took, or
    None when it was still open after `seconds`."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as s:
        try:
            s.sendall(payload)
        except OSError:
            return time.monotonic() - start  # closed while we were still sending
        deadline = start + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            s.settimeout(left)
            try:
                if not s.recv(1 << 16):
                    return time.monotonic() - start
            except socket.timeout:
                return None
            except OSError:
                return time.monotonic() - start  # reset


def main():
    port = int(sys.argv[1])
    handshake_timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    failures = []
    results = {}

    def run(name, payload, bound):
        try:
            took = closed_within(port, payload, bound)
        except ConnectionRefusedError:
            failures.append(f"{name}: nobody listens on port {port} any more (the node died?)")
            return
        results[name] = took
        if took is None:
            failures.append(f"{name}: the connection was still open after {bound:.0f} s")

    # The silent ones wait for the handshake deadline: run them alongside the others.
    threads = [threading.Thread(target=run, args=(n, p, handshake_timeout + 5))
               for n, p in SILENT_VARIANTS]
    for t in threads:
        t.start()
    for name, payload in VARIANTS:
        run(name, payload, 5.0)
    for t in threads:
        t.join()
    for name, _ in VARIANTS + SILENT_VARIANTS:
        took = results.get(name)
        print(f"port {port}: {name}: " +
              ("not closed" if took is None else f"closed by the node after {took:.2f} s"))
    if failures:
        sys.exit("; ".join(failures))


if __name__ == "__main__":
    main()

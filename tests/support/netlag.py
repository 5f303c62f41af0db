"""Latency between test namespaces, added in user space, and a record of what crossed the wire when.

This kernel has no ``sch_netem`` (``tc qdisc add … netem`` answers "Specified qdisc kind is
unknown"), so delay and jitter come from a relay instead:

``python -m tests.support.netlag relay --listen 127.0.0.1:5557 --connect 10.213.1.2:5557 --delay-ms 25
--jitter-ms 5 --seed 1 --log PATH`` accepts TCP connections and forwards each byte to ``--connect``
after a delay, each direction on its own seeded schedule (``DelaySchedule``): a chunk read at t is
written at max(t + delay + u, previous chunk's release), u uniform in [-jitter, +jitter]; the max
keeps the bytes of a connection in order (jitter never reorders). Run inside a worker's namespace
in front of the master's port, it gives master <-> worker a round trip of 2 × delay ± 2 × jitter.
With ``--log`` it also records each new ``llm_phase`` message (the master's phase broadcast, a
Locust custom message: msgpack ``("llm_phase", {"stage", "kind", "seq"}, node_id)``) going from
master to worker: seq, stage, kind, ``t_in`` (read from the master) and ``t_out`` (written to the
worker), wall-clock seconds (one clock for every namespace of the machine).

``python -m tests.support.netlag tap --dev eth0 --port 8000 --log PATH`` records, from a packet socket, the
kernel timestamp of every HTTP request (a TCP segment to ``--port`` whose payload starts with
``POST ``) leaving this namespace: when each request was really sent, without touching its path.

Both print one ready line (``NETLAG_READY``) on stdout and write JSON lines to ``--log``.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import random
import socket
import struct
import sys
import time

PHASE_MARK = b"\x93\xa9llm_phase"  # msgpack: a 3-element array whose first item is "llm_phase"
READY = "NETLAG_READY"


class DelaySchedule:
    """Release times for the chunks of one direction of one connection (no I/O, no clock)."""

    def __init__(self, delay_s: float, jitter_s: float, seed):
        if delay_s < 0 or jitter_s < 0 or jitter_s > delay_s:
            raise ValueError(f"need 0 <= jitter <= delay, got delay {delay_s} s, jitter {jitter_s} s")
        self.delay_s, self.jitter_s = delay_s, jitter_s
        self.rng = random.Random(str(seed))
        self.last_s = float("-inf")

    def release_s(self, arrival_s: float) -> float:
        """max(arrival + delay + U(-jitter, jitter), previous release): later bytes never overtake."""
        u = self.rng.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0
        self.last_s = max(arrival_s + self.delay_s + u, self.last_s)
        return self.last_s


class PhaseSpy:
    """Finds ``llm_phase`` messages in a byte stream fed in arbitrary pieces."""

    def __init__(self):
        import msgpack

        self._msgpack = msgpack
        self.buf = b""
        self.seen: set[int] = set()

    def feed(self, data: bytes) -> list[dict]:
        """The phase messages with a seq not seen before that ``data`` completes."""
        self.buf += data
        found = []
        while (start := self.buf.find(PHASE_MARK)) >= 0:
            unpacker = self._msgpack.Unpacker(raw=False, strict_map_key=False)
            unpacker.feed(self.buf[start:])
            try:
                _, body, _ = unpacker.unpack()
            except self._msgpack.OutOfData:
                self.buf = self.buf[start:]  # the rest of this message is still on its way
                return found
            self.buf = self.buf[start + unpacker.tell():]
            if isinstance(body, dict) and body.get("seq") not in self.seen:
                self.seen.add(body.get("seq"))
                found.append({"seq": body.get("seq"), "stage": body.get("stage"), "kind": body.get("kind")})
        self.buf = self.buf[-len(PHASE_MARK):]
        return found


class Relay:
    def __init__(self, connect: tuple[str, int], delay_s: float, jitter_s: float, seed, log):
        self.connect, self.delay_s, self.jitter_s, self.seed, self.log = connect, delay_s, jitter_s, seed, log
        self.conns = 0

    async def handle(self, down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter) -> None:
        n = self.conns = self.conns + 1
        try:
            up_r, up_w = await asyncio.open_connection(*self.connect)
        except OSError:
            down_w.close()
            return
        writers = (down_w, up_w)
        spy = PhaseSpy() if self.log else None
        await asyncio.gather(
            self.pump(down_r, up_w, DelaySchedule(self.delay_s, self.jitter_s, (self.seed, n, "up")), None, writers),
            self.pump(up_r, down_w, DelaySchedule(self.delay_s, self.jitter_s, (self.seed, n, "down")), spy, writers),
        )

    async def pump(self, reader, writer, schedule: DelaySchedule, spy: PhaseSpy | None, writers) -> None:
        """Copy reader -> writer, each chunk held until its release time; close both at the end."""
        queue: asyncio.Queue = asyncio.Queue()

        async def send() -> None:
            while (item := await queue.get()) is not None:
                release_s, data, t_in, phases = item
                if (wait := release_s - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
                t_out = time.time()
                for p in phases:
                    self.log.write(json.dumps({**p, "t_in": t_in, "t_out": t_out}) + "\n")
                    self.log.flush()

        sender = asyncio.create_task(send())
        try:
            while data := await reader.read(65536):
                phases = spy.feed(data) if spy else []
                queue.put_nowait((schedule.release_s(time.monotonic()), data, time.time(), phases))
        except OSError:
            pass
        queue.put_nowait(None)
        try:
            await sender
        except OSError:
            pass
        for w in writers:
            w.close()


async def _relay_main(args) -> None:
    host, port = args.listen.rsplit(":", 1)
    to_host, to_port = args.connect.rsplit(":", 1)
    log = open(args.log, "a") if args.log else None  # noqa: SIM115 (lives as long as the process)
    relay = Relay((to_host, int(to_port)), args.delay_ms / 1e3, args.jitter_ms / 1e3, args.seed, log)
    server = await asyncio.start_server(relay.handle, host, int(port))
    print(READY, flush=True)
    async with server:
        await server.serve_forever()


# -- tap: when requests left this namespace ------------------------------------------------------------
SO_ATTACH_FILTER, SO_TIMESTAMPNS = 26, 35


def _bpf_tcp_dst_port(port: int) -> list[tuple[int, int, int, int]]:
    """Classic BPF: accept IPv4 TCP frames to ``port`` (ldh [12]; ldb [23]; ldxb 4*([14]&0xf); ldh [x+16])."""
    return [(0x28, 0, 0, 12), (0x15, 0, 6, 0x0800), (0x30, 0, 0, 23), (0x15, 0, 4, 6),
            (0xB1, 0, 0, 14), (0x48, 0, 0, 16), (0x15, 0, 1, port), (0x06, 0, 0, 0xFFFF), (0x06, 0, 0, 0)]


def _tap_main(args) -> None:
    # ETH_P_ALL: frames this host sends reach only all-protocol taps; the filter keeps IPv4 TCP
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    prog = _bpf_tcp_dst_port(args.port)
    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in prog))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("HL", len(prog), ctypes.addressof(code)))
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((args.dev, 0))
    seen: set[tuple[int, int]] = set()
    with open(args.log, "a") as log:
        print(READY, flush=True)
        while True:
            frame, anc, _, _ = sock.recvmsg(65536, 64)
            ip = frame[14:]
            tcp = ip[(ip[0] & 0x0F) * 4:]
            payload = tcp[(tcp[12] >> 4) * 4:]
            if not payload.startswith(b"POST "):
                continue
            sport, seq = struct.unpack("!H", tcp[:2])[0], struct.unpack("!I", tcp[4:8])[0]
            if (sport, seq) in seen:  # a retransmission
                continue
            seen.add((sport, seq))
            t = time.time()
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", data[:16])
                    t = sec + nsec / 1e9
            log.write(json.dumps({"t": t, "sport": sport}) + "\n")
            log.flush()


def read_log(path) -> list[dict]:
    """The JSON lines a relay or tap wrote (an absent file: none)."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.support.netlag", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("relay")
    r.add_argument("--listen", required=True)
    r.add_argument("--connect", required=True)
    r.add_argument("--delay-ms", type=float, default=0.0)
    r.add_argument("--jitter-ms", type=float, default=0.0)
    r.add_argument("--seed", default="0")
    r.add_argument("--log")
    t = sub.add_parser("tap")
    t.add_argument("--dev", default="eth0")
    t.add_argument("--port", type=int, required=True)
    t.add_argument("--log", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "relay":
        asyncio.run(_relay_main(args))
    else:
        _tap_main(args)


if __name__ == "__main__":
    main(sys.argv[1:])

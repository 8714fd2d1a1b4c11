"""A tiny DNS server on 127.0.0.1 for fetch-safety tests, and a resolver that asks it.

    with DnsServer({"rebind.test": ["93.184.215.14", "127.0.0.1"]}) as dns:
        client = httpclient.fetching(resolve=dns.resolve)
        ...
        dns.queries          # ["rebind.test", ...]: one name per lookup, in order

Each name's answers are handed out one per query, the last repeated: a name that
answers a public address first and 127.0.0.1 after is a rebinding attack. It answers
A queries over UDP (standard library only); an unknown name gets NXDOMAIN.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import threading
from types import TracebackType


class DnsServer:
    def __init__(self, answers: dict[str, list[str]]) -> None:
        self._answers = {name.lower(): list(found) for name, found in answers.items()}
        self._served: dict[str, int] = {}
        self.queries: list[str] = []
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.settimeout(0.05)  # so the thread sees a stop soon (closing wakes nothing)
        self._stopping = threading.Event()
        self.address: tuple[str, int] = self._socket.getsockname()
        self._thread = threading.Thread(target=self._serve, name="fake-dns", daemon=True)

    def __enter__(self) -> DnsServer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stopping.set()
        self._thread.join(5)
        self._socket.close()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                packet, peer = self._socket.recvfrom(512)
            except TimeoutError:
                continue
            self._socket.sendto(self._answer(packet), peer)

    def _answer(self, packet: bytes) -> bytes:
        ident = packet[:2]
        name, end = _name(packet, 12)
        question = packet[12 : end + 4]
        self.queries.append(name)
        found = self._answers.get(name.lower())
        if not found:
            return ident + struct.pack(">HHHHH", 0x8183, 1, 0, 0, 0) + question
        served = self._served.get(name.lower(), 0)
        self._served[name.lower()] = served + 1
        address = found[min(served, len(found) - 1)]
        record = struct.pack(">HHHIH", 0xC00C, 1, 1, 0, 4) + ipaddress.IPv4Address(address).packed
        return ident + struct.pack(">HHHHH", 0x8180, 1, 1, 0, 0) + question + record

    async def resolve(self, host: str, port: int) -> list[str]:
        """Ask this server for `host`'s A record (dialer.Resolver); OSError on NXDOMAIN."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._ask, host)

    def _ask(self, host: str) -> list[str]:
        query = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
        query += b"".join(bytes([len(p)]) + p.encode() for p in host.split(".")) + b"\0"
        query += struct.pack(">HH", 1, 1)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as asker:
            asker.settimeout(5)
            asker.sendto(query, self.address)
            reply = asker.recv(512)
        if reply[3] & 0x0F or not struct.unpack(">H", reply[6:8])[0]:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} not found")
        return [str(ipaddress.IPv4Address(reply[-4:]))]


def _name(packet: bytes, at: int) -> tuple[str, int]:
    labels = []
    while packet[at]:
        labels.append(packet[at + 1 : at + 1 + packet[at]].decode())
        at += 1 + packet[at]
    return ".".join(labels), at + 1

"""A real SMTP server on a loopback port (aiosmtpd) that keeps what it receives.

with smtp_server.running() as (recorder, controller):
    ...  # connect to 127.0.0.1:controller.port; log in as bot / pa55
    assert recorder.envelopes == []
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

#: The one login the server accepts: fixtures, not secrets.
USERNAME, PASSWORD = "bot", "pa55"


class Recorder:
    """An aiosmtpd handler that keeps every envelope, or refuses recipients with `refuse`."""

    def __init__(self, refuse: str | None = None) -> None:
        self.envelopes: list[Any] = []
        self.refuse = refuse

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        if self.refuse:
            return self.refuse
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        return "250 Message accepted"


class EphemeralController(Controller):
    """aiosmtpd's Controller on port 0: learn the real port before the readiness probe."""

    def _trigger_server(self) -> None:
        assert isinstance(self.server, asyncio.Server)
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()  # type: ignore[no-untyped-call]


def check_login(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
    ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
        USERNAME.encode(),
        PASSWORD.encode(),
    )
    # handled=False: let aiosmtpd answer 535 itself (True means "I already replied").
    return AuthResult(success=ok, handled=False)


@contextlib.contextmanager
def running() -> Iterator[tuple[Recorder, EphemeralController]]:
    recorder = Recorder()
    controller = EphemeralController(
        recorder,
        hostname="127.0.0.1",
        port=0,
        authenticator=check_login,
        auth_require_tls=False,
    )
    controller.start()
    try:
        yield recorder, controller
    finally:
        controller.stop()

"""The crash bench's cast: the killer, the observed Bot API server, the scripted operator,
the bot process and the feed (see bench/crash.py for how they play together)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.demo.botapi import localapi
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer

TOKEN = "515151:crash-bench-token-not-secret_abcdefgh"  # noqa: S105 (a fake)
OPERATOR = 4242
ROOT = Path(__file__).resolve().parent.parent


class Killer:
    """Kills the bot from a fake server's handler thread when the armed point is reached."""

    def __init__(self) -> None:
        self.fired = threading.Event()
        self._lock = threading.Lock()
        self._armed: str | None = None
        self._pid: int | None = None

    def arm(self, point: str, pid: int) -> None:
        with self._lock:
            self._armed, self._pid = point, pid
            self.fired.clear()

    def disarm(self) -> None:
        with self._lock:
            self._armed = self._pid = None

    def hit(self, point: str) -> None:
        with self._lock:
            if self._armed != point or self._pid is None:
                return
            os.kill(self._pid, signal.SIGKILL)
            self._armed = self._pid = None
            self.fired.set()


class ObservedBotApi(localapi.LocalBotApi):
    """The local Bot API server, telling the killer when it has accepted a card."""

    def __init__(self, killer: Killer) -> None:
        super().__init__(token=TOKEN)
        self.killer = killer

    def start(self) -> ObservedBotApi:
        super().start()
        assert self._server is not None
        self._server.handle_error = _quiet_if_gone(self._server.handle_error)  # type: ignore[method-assign, assignment]
        return self

    def handle_bot_api(self, token: str, method: str, params: dict[str, Any]) -> tuple[int, Any]:
        answer = super().handle_bot_api(token, method, params)
        is_card = "callback_data" in str(params.get("reply_markup", ""))
        if method.lower() == "sendmessage" and answer[0] == 200 and is_card:
            self.killer.hit("card")  # stored here, the answer not yet sent back
        return answer


def _quiet_if_gone(handle_error: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """A connection reset by the killed bot is expected here, not a traceback to print."""

    def handle(request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            handle_error(request, client_address)

    return handle


class Operator(threading.Thread):
    """Taps Approve on every card the bot sends, as soon as it shows up, and taps again
    when a tap got no answer within RETAP_S (the bot died before answering it), as a
    person facing a spinning button would."""

    RETAP_S = 3.0

    def __init__(self, api: localapi.LocalBotApi) -> None:
        super().__init__(name="crash-operator", daemon=True)
        self.api = api
        self.stop = threading.Event()
        #: message id -> (callback query id of the last tap, when it was made)
        self.taps: dict[int, tuple[str, float]] = {}
        self.queries: list[str] = []

    def run(self) -> None:
        while not self.stop.wait(0.05):
            answered = {a["callback_query_id"] for a in self.api.callback_answers()}
            for message in self.api.sent(OPERATOR):
                data = _approve_button(message.reply_markup)
                last = self.taps.get(message.message_id)
                if data is None or (last and (last[0] in answered or _recent(last[1]))):
                    continue
                query = self.api.inject_callback(OPERATOR, OPERATOR, message.message_id, data)
                self.taps[message.message_id] = (query, time.monotonic())
                self.queries.append(query)

    def unanswered(self) -> int:
        """Taps the bot never answered: lost with a killed process, or answered by none."""
        answered = {a["callback_query_id"] for a in self.api.callback_answers()}
        return sum(query not in answered for query in self.queries)


def _recent(at: float) -> bool:
    return time.monotonic() - at < Operator.RETAP_S


def _approve_button(markup: dict[str, Any] | None) -> str | None:
    for row in (markup or {}).get("inline_keyboard", []):
        for key in row:
            if "Approve" in key.get("text", "") and "callback_data" in key:
                return str(key["callback_data"])
    return None


class BotProcess:
    """`python -m bot` with the bench's settings; output appended to one log file."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp = tmp
        self.log = tmp / "bot.log"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        self.starts += 1
        with self.log.open("ab") as out:
            out.write(f"\n=== start {self.starts} ===\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bot"], cwd=ROOT, env=self.env, stdout=out, stderr=out
            )

    def kill(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def exited_alone(self) -> int | None:
        """The exit code if the bot ended without being killed, else None."""
        assert self.proc is not None
        code = self.proc.poll()
        return None if code is None or code == -signal.SIGKILL else code

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


class Feed:
    """The feed the pipeline polls; each entry's title carries its tag (crash-00001)."""

    def __init__(self, server: FeedServer) -> None:
        self.server = server
        self.entries: list[tuple[str, str, str]] = []

    @property
    def url(self) -> str:
        return self.server.url("/feed.xml")

    def add(self, n: int) -> None:
        for _ in range(n):
            tag = f"crash-{len(self.entries) + 1:05d}"
            self.entries.append((tag, f"Story {tag}", f"What happened in {tag}, in brief."))
        self.server.set("/feed.xml", feeds.rss(self.entries), "application/rss+xml")

    def tags(self) -> list[str]:
        return [tag for tag, _, _ in self.entries]

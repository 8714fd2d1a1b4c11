"""Resuming the demo from its data directory: the conversation so far, and the open cards.

    restored = demo_resume.restore_chat(api, data_dir)   # before the bot starts
    await card_trail.resend_open(store, now)        # then the cards still waiting
    saver = demo_resume.Saver(api, data_dir).start()     # keeps demo-chat.json current
    saver.stop()                                         # and writes it a last time

The local Bot API server keeps chats in memory; the demo writes them to `demo-chat.json`
in its data directory, so a restart shows the page the conversation it had. Restored
messages keep their text and ids but lose their buttons and reply prompts: the store
decides what is still open, and those cards are sent again, live, below the history.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from pathlib import Path

from bot.demo.botapi import localapi
from bot.demo.botapi import state as localapi_state

log = logging.getLogger(__name__)

CHAT_FILE = "demo-chat.json"
#: A saved conversation larger than this is not read (bytes); a demo's is a few hundred KiB.
MAX_CHAT_BYTES = 32 * 1024 * 1024
#: How often the saver looks for changes (seconds); a kill loses at most this much.
SAVE_EVERY_S = 2.0


def save_chat(api: localapi.LocalBotApi, data_dir: Path) -> None:
    """Write every chat to CHAT_FILE atomically (a new file, then a rename)."""
    messages = [dataclasses.asdict(m) for m in api.state.export()]
    path = data_dir / CHAT_FILE
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps({"messages": messages}, ensure_ascii=False))
    os.replace(scratch, path)


def restore_chat(api: localapi.LocalBotApi, data_dir: Path) -> int:
    """Put the saved chats back into the server, without buttons; returns how many
    messages. A missing file is a first run; an unreadable one is logged and skipped."""
    path = data_dir / CHAT_FILE
    if not path.exists():
        return 0
    try:
        if path.stat().st_size > MAX_CHAT_BYTES:
            raise ValueError(f"larger than {MAX_CHAT_BYTES} bytes")
        saved = json.loads(path.read_text())["messages"]
        messages = [_inert(localapi_state.ChatMessage(**found)) for found in saved]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("the demo's saved chat %s was not restored: %s", path, exc)
        return 0
    api.state.restore(messages)
    return len(messages)


def _inert(message: localapi_state.ChatMessage) -> localapi_state.ChatMessage:
    # History only: a button or prompt of an earlier run would act on a card the store
    # has moved on from, or one sent again below.
    return dataclasses.replace(message, reply_markup=None)


class Saver:
    """Writes the chats every SAVE_EVERY_S while they change, and once more on stop."""

    def __init__(self, api: localapi.LocalBotApi, data_dir: Path) -> None:
        self.api = api
        self.data_dir = data_dir
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-chat-saver", daemon=True)
        self._saved = -1

    def start(self) -> Saver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._save()

    def _run(self) -> None:
        while not self._stop.wait(SAVE_EVERY_S):
            self._save()

    def _save(self) -> None:
        revision = self.api.state.revision
        if revision == self._saved:
            return
        try:
            save_chat(self.api, self.data_dir)
        except OSError as exc:  # a full disk stops the saving, never the demo
            log.warning("the demo's chat was not saved: %s", exc)
            return
        self._saved = revision

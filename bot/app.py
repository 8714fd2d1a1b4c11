"""The operator bot: python-telegram-bot and the engine in one event loop.

    python -m bot            # or: gatehouse run

Settings come from the environment (see bot.settings). The bot refuses to start without a
token or operators, and in webhook mode without a webhook URL and secret token (Telegram
sends it back in a header that PTB compares in constant time). `build()` registers every
handler, so the whole command surface reads on one screen.
"""

from __future__ import annotations

import os

# Before PTB is imported anywhere: RetryAfter.retry_after becomes a timedelta, without
# a deprecation warning on every flood-control answer.
os.environ.setdefault("PTB_TIMEDELTA", "1")

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeAlias

from telegram import Bot, Update
from telegram import error as tg_error
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    ChatMemberHandler,
    CommandHandler,
    MessageHandler,
    SimpleUpdateProcessor,
    TypeHandler,
    filters,
)
from telegram.request import HTTPXRequest

from bot import settings as settings_mod
from bot.cards import review_handlers, routes
from bot.chat import auth, group_events, kit, lists, polling, rooms, sender
from bot.commands import handlers
from bot.ground import logs, storage_alarm
from bot.process import control, outbox_routes, startup
from bot.web import api, metrics
from pipelines.audit import trust as audit_trust
from pipelines.audit import witness as audit_witness
from pipelines.drafting import choice
from pipelines.ground import httpclient, waiting
from pipelines.service import dispatcher, nudges, triage_digest
from pipelines.service import runtime as runtime_mod
from store import db, errors

log = logging.getLogger(__name__)

#: A flood-control answer is retried once inside PTB; the sender reschedules the rest.
RATE_LIMIT_RETRIES = 1
ALLOWED_UPDATES = [Update.MESSAGE, Update.CALLBACK_QUERY, Update.MY_CHAT_MEMBER]
#: How long a thread may hold the GIL while another waits (Python's default is 5 ms).
#: Feed parsing and the duplicate gate run in threads beside the event loop and the
#: store's lanes, and a tap's every step from one thread to the next could wait a whole
#: interval behind them; a shorter interval costs the tick nothing (`bench bot`, tick).
GIL_SWITCH_S = 0.0005

App: TypeAlias = Application[Any, Any, Any, Any, Any, Any]


def file_url(base_url: str) -> str:
    """The file download base that belongs with a Bot API base ending in /bot."""
    return base_url.removesuffix("/bot") + "/file/bot"


class OperatorFirst(SimpleUpdateProcessor):
    """One update at a time, as PTB's default; the store runs the writes made for it
    before background work (a tick's), since an operator waits for them."""

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        with db.foreground():
            await coroutine


def build(cfg: settings_mod.Settings, token: str) -> App:
    """The PTB application with every handler; Deps are attached by `serve`."""
    limiter = metrics.CountingLimiter(
        overall_max_rate=cfg.telegram.flood_limit_per_second,
        group_max_rate=cfg.telegram.group_messages_per_minute,
        max_retries=RATE_LIMIT_RETRIES,
    )
    application: App = (
        ApplicationBuilder()
        .token(token)
        .context_types(kit.CONTEXT_TYPES)
        .base_url(cfg.telegram.base_url)
        .base_file_url(file_url(cfg.telegram.base_url))
        .rate_limiter(limiter)
        .concurrent_updates(OperatorFirst(1))
        # The builder's own pool sizes (256; 1 for the long poll), with the shared TLS context.
        .request(HTTPXRequest(connection_pool_size=256, httpx_kwargs=httpclient.shared_tls()))
        .get_updates_request(
            HTTPXRequest(connection_pool_size=1, httpx_kwargs=httpclient.shared_tls())
        )
    ).build()
    add = application.add_handler
    add(TypeHandler(Update, polling.once), group=-2)  # an update another worker handled
    # The groups cards go to, as Telegram changes them (from anyone, before the gate).
    add(MessageHandler(filters.StatusUpdate.MIGRATE, group_events.migrated), group=-1)
    add(ChatMemberHandler(group_events.membership, ChatMemberHandler.MY_CHAT_MEMBER), group=-1)
    add(TypeHandler(Update, handlers.gate), group=-1)  # the operator check, before anything
    add(CommandHandler(["help", "start"], handlers.help_))
    add(CommandHandler("status", handlers.status))
    add(CommandHandler("pending", handlers.pending))
    add(CommandHandler("budget", handlers.budget))
    add(CommandHandler(["run", "pause", "resume"], handlers.schedule_command))
    add(CommandHandler("history", handlers.history))
    add(CommandHandler("replay", handlers.replay))
    add(CommandHandler("skipped", lists.skipped))
    add(CommandHandler("filtered", lists.filtered))
    add(CommandHandler("stats", handlers.stats))
    add(MessageHandler(filters.COMMAND, handlers.unknown))
    add(CallbackQueryHandler(routes.tap))  # every button: its route is in ROUTES
    add(MessageHandler(filters.REPLY & filters.TEXT & ~filters.COMMAND, review_handlers.reply))
    # Private chats only: in a group, talk among people is not for the bot.
    add(MessageHandler(filters.ChatType.PRIVATE & filters.TEXT, handlers.plain_text))
    application.add_error_handler(handlers.on_error)
    return application


async def serve(
    cfg: settings_mod.Settings,
    token: str,
    runtime: runtime_mod.Runtime,
    stop: asyncio.Event,
    application: App | None = None,
) -> None:
    """Run PTB, the outbox sender and (already started) engine until `stop` is set."""
    sys.setswitchinterval(GIL_SWITCH_S)
    application = application or build(cfg, token)
    key = startup.callback_key(cfg, token)
    groups = rooms.Rooms(
        runtime.store,
        runtime.pipelines,
        default_chat=cfg.telegram.cards_chat,
        operators=cfg.telegram.operators,
    )
    outbox_sender = sender.Sender(
        runtime.store,
        application.bot,
        outbox_routes.targets(cfg, runtime, groups),
        outbox_routes.keyboard(key, runtime),
        cfg.telegram.chat_messages_per_second,
        clock=runtime.now,
        report=runtime.workers.report,
        may_send=runtime.leader.trusted,
        rooms=groups,
        threads=outbox_routes.threads(groups),
        per_group_per_second=cfg.telegram.group_messages_per_minute / 60,
    )
    gate = auth.Gate(cfg.telegram.operators, cfg.telegram.rate_limit_per_minute)
    application.bot_data["deps"] = kit.Deps(
        runtime.store,
        runtime.pipelines,
        runtime.scheduler,
        gate,
        key,
        outbox_sender,
        runtime.now,
        workers=runtime.workers,
        lease_ttl=runtime.config.lease_ttl,
        broken=runtime.loaded.broken,
        drafter_for=runtime.config.drafter_for,
        settlers=frozenset(cfg.telegram.settlers),
    )
    async with application:
        await application.start()
        await groups.prepare(application.bot, runtime.now())
        await _start_updates(application, cfg, runtime)
        # The leader alone sends cards and alerts (per-chat pacing lives with it).
        runtime.lead(sender.NAME, outbox_sender.run)
        metrics.set_leader(runtime.leader.trusted)
        menu = asyncio.create_task(
            startup.publish_commands(application.bot, stop), name="command-menu"
        )
        log.info("bot started: %d operator(s), %s mode", len(gate.operators), cfg.telegram.mode)
        try:
            await stop.wait()
        finally:
            menu.cancel()
            await _stop_cleanly(application, runtime)
            await asyncio.gather(menu, return_exceptions=True)


async def _stop_cleanly(application: App, runtime: runtime_mod.Runtime) -> None:
    """Take no new updates or work; handle the taps in hand and let the engine's work in
    flight finish or park; then the leader's duties end and the audit head is sealed and
    signed over every event written. Leader duties use the bot: all before it closes."""
    assert application.updater is not None
    if application.updater.running:  # webhook mode; polling is a duty that ends now too
        await application.updater.stop()
    runtime.take_no_new_work()
    await application.stop()
    await runtime.finish_work()
    await runtime.leader.stand_down()


async def _start_updates(
    application: App, cfg: settings_mod.Settings, runtime: runtime_mod.Runtime
) -> None:
    """Polling: the leader alone polls (Telegram allows one poller). Webhook: every
    worker takes the updates sent to it."""
    tg = cfg.telegram
    assert application.updater is not None
    if tg.mode == "polling":

        async def poll(lost: asyncio.Event) -> None:
            # Until the lead is lost, or a clean stop begins (no new taps from then on).
            stop = asyncio.Event()
            watch = asyncio.ensure_future(waiting.set_when_any(stop, (lost, runtime.stopping)))
            try:
                await polling.poll(application, runtime.leader, ALLOWED_UPDATES, stop)
            finally:
                watch.cancel()

        runtime.lead(polling.NAME, poll)
        return
    assert tg.webhook_secret is not None and tg.webhook_url is not None
    await application.updater.start_webhook(
        listen=tg.webhook_listen,
        port=tg.webhook_port,
        url_path="telegram",
        webhook_url=tg.webhook_url,
        secret_token=tg.webhook_secret.get_secret_value(),
        allowed_updates=ALLOWED_UPDATES,
    )


def _alert_sender(cfg: settings_mod.Settings, bot: Bot) -> storage_alarm.Send:
    """Send an alert straight with the bot: the path for when the store cannot write."""

    async def send(text: str) -> None:
        # Each chat alone: one that blocked the bot must not make the others hear it twice.
        errors_seen: list[tg_error.TelegramError] = []
        chats = outbox_routes.alert_chats(cfg)
        for chat in chats:
            try:
                await bot.send_message(chat, text)
            except tg_error.TelegramError as exc:
                log.warning("storage alert to chat %d failed: %s", chat, exc)
                errors_seen.append(exc)
        if chats and len(errors_seen) == len(chats):
            raise errors_seen[-1]  # nobody heard it: the alarm tries again

    return send


def runtime_config(cfg: settings_mod.Settings, application: App) -> runtime_mod.RuntimeConfig:
    """The engine as the bot runs it: drafters, the dispatch worker, the control socket
    and the storage alarm."""
    choose = choice.Drafters(cfg.llm, cfg.prices)
    alarm = storage_alarm.make_worker(_alert_sender(cfg, application.bot))
    return runtime_mod.RuntimeConfig(
        store=settings_mod.store_config(cfg),
        pipelines_dir=cfg.pipelines_dir,
        load_context=settings_mod.pipeline_context(cfg),
        drafter_for=choose,
        workers=(
            choose.worker,
            dispatcher.make_worker(application.bot),
            control.serve,
            alarm,
            nudges.worker,
            *listeners(cfg),
        ),
        duties=(_witness(cfg), triage_digest.worker),
        max_items_per_tick=cfg.engine.max_items_per_tick,
        lease_ttl=timedelta(seconds=cfg.cluster.lease_ttl_s),
        dispatch_lease=timedelta(seconds=cfg.cluster.dispatch_lease_s),
        max_seal_delay=timedelta(seconds=cfg.audit.max_seal_delay_s),
    )


def _witness(cfg: settings_mod.Settings) -> runtime_mod.Worker:
    """The audit witness, with the deployment key when the workers share a secret to
    derive it from (each leader's key then verifies on every worker)."""
    secret = settings_mod.deployment_secret(cfg)
    return audit_witness.make_worker(audit_trust.deployment_key(secret) if secret else None)


def listeners(cfg: settings_mod.Settings) -> list[runtime_mod.Worker]:
    """The opt-in HTTP listeners: Prometheus metrics and the HTTP trigger."""
    found: list[runtime_mod.Worker] = []
    if cfg.metrics.listen:
        found.append(metrics.worker(cfg.metrics.listen))
    if cfg.api.listen:
        found.append(api.worker(cfg.api.listen, cfg.api.requests_per_minute))
    return found


async def run(cfg: settings_mod.Settings, token: str) -> None:
    """Reach Telegram, start the engine, then the bot; SIGTERM or SIGINT stops both."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    application = build(cfg, token)
    runtime = None
    try:
        if await startup.connect(application.bot, stop):
            runtime = await runtime_mod.Runtime.start(runtime_config(cfg, application))
    finally:
        if runtime is None:  # serve never runs, so nothing else closes the bot's client
            await application.bot.shutdown()
    if runtime is None:
        return
    try:
        await serve(cfg, token, runtime, stop, application)
    finally:
        await runtime.stop()
        log.info("bot stopped")


def main(
    cfg: settings_mod.Settings | None = None,
    *,
    env_file: Path | None = None,
    data_dir: Path | None = None,
) -> int:
    """Entry point: 0 after a clean stop, 2 for bad settings or an unusable store."""
    try:
        cfg = cfg or settings_mod.load_for(env_file, data_dir)
        token = startup.check(cfg)
    except (settings_mod.SettingsInvalid, startup.StartupRefused) as exc:
        print(f"gatehouse: {exc}", file=sys.stderr)
        return 2
    logs.setup(cfg.log_level, [token, *cfg.secrets()], json_lines=cfg.log_format == "json")
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run(cfg, token))
    except (*errors.STARTUP_ERRORS, startup.TokenRejected) as e:
        print(f"gatehouse: {e}", file=sys.stderr)
        return 2
    except errors.StoreError as e:  # the store failed while starting (full, corrupt, ...)
        print(f"gatehouse: the store failed at startup: {e}", file=sys.stderr)
        return 2
    except Exception:
        # Through logging, so the redacting filter sees the traceback: Python's own
        # printer would show a token held in an exception's text.
        log.critical("gatehouse stopped on an unexpected error", exc_info=True)
        return 1
    return 0

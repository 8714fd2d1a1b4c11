"""A real Dovecot IMAP server on 127.0.0.1 for tests (plain IMAP, one passwd-file user).

    with dovecot.running() as server:
        server.deliver(b"From: a@example.org\\r\\nMessage-ID: <1@x>\\r\\n\\r\\nhi\\r\\n")
        # IMAP on server.host:server.port, LOGIN server.user / server.password

Needs the `dovecot` binary (`apt-get install dovecot-imapd`); `skip_reason()` says why a
test cannot run without it. Everything Dovecot writes lives in a private temp directory
that is removed afterwards. Messages dropped into Maildir/new/ show up as UNSEEN.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: The test user's password: a fixture, not a secret.
TEST_PASSWORD = "correct horse"

#: How long to wait for Dovecot to accept connections before giving up.
START_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Dovecot:
    """A running server and the one user it knows."""

    host: str
    port: int
    user: str
    password: str
    maildir: Path
    _uid: int
    _gid: int

    def deliver(self, message: bytes) -> Path:
        """Drop one raw message (CRLF line endings) into the user's INBOX as unseen mail."""
        path = self.maildir / "new" / f"{time.time_ns()}.{uuid.uuid4().hex}.gatehouse-test"
        path.write_bytes(message)
        if os.geteuid() == 0:
            os.chown(path, self._uid, self._gid)
        return path


def skip_reason() -> str | None:
    """Why a Dovecot test cannot run here, or None when it can."""
    if shutil.which("dovecot") is None:
        return "dovecot not installed: apt-get install dovecot-imapd"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _mail_owner() -> tuple[int, int]:
    """Dovecot refuses to serve mail as root, so root hands the mailbox to `nobody`."""
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        return nobody.pw_uid, nobody.pw_gid
    return os.geteuid(), os.getegid()


def _config(root: Path, port: int, uid: int, gid: int) -> str:
    if os.geteuid() == 0:
        privileges = "default_internal_user = dovecot\ndefault_login_user = dovenull\n"
    else:
        # Without root Dovecot cannot switch users or chroot: run everything as ourselves.
        me = pwd.getpwuid(os.geteuid()).pw_name
        privileges = (
            f"default_internal_user = {me}\ndefault_login_user = {me}\n"
            "service anvil {\n  chroot =\n}\nservice imap-login {\n  chroot =\n}\n"
        )
    return f"""\
protocols = imap
listen = 127.0.0.1
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
info_log_path = {root}/dovecot.log
ssl = no
disable_plaintext_auth = no
auth_failure_delay = 0
auth_mechanisms = plain login
first_valid_uid = {min(uid, 500)}
first_valid_gid = 0
mail_location = maildir:~/Maildir
{privileges}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN {root}/passwd
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={root}/home
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
"""


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            detail = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(f"dovecot exited with {process.returncode}: {detail}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise RuntimeError(f"dovecot did not listen on 127.0.0.1:{port} within the timeout")


@contextlib.contextmanager
def running(user: str = "agent@example.org", password: str = TEST_PASSWORD) -> Iterator[Dovecot]:
    """Start Dovecot in the foreground on a free loopback port; stop it and clean up after."""
    uid, gid = _mail_owner()
    # Not pytest's tmp_path: that is private to us, and the mail user must traverse it.
    root = Path(tempfile.mkdtemp(prefix="gh-dovecot-"))
    try:
        root.chmod(0o755)
        maildir = root / "home" / "Maildir"
        for sub in ("new", "cur", "tmp"):
            (maildir / sub).mkdir(parents=True)
        if os.geteuid() == 0:
            for path in (root / "home", maildir, *(maildir / s for s in ("new", "cur", "tmp"))):
                os.chown(path, uid, gid)
        (root / "passwd").write_text(f"{user}:{{PLAIN}}{password}\n")
        port = _free_port()
        conf = root / "dovecot.conf"
        conf.write_text(_config(root, port, uid, gid))
        process = subprocess.Popen(["dovecot", "-F", "-c", str(conf)])
        try:
            _wait_for_port(port, process, root / "dovecot.log")
            yield Dovecot("127.0.0.1", port, user, password, maildir, uid, gid)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)

"""The private data directory and the single-writer lock inside it.

The lock is an flock on `gatehouse.lock`, a file of its own: SQLite's files are
never opened by us, because closing any descriptor on the database, `-wal` or
`-shm` silently drops the locks SQLite holds on them (POSIX lock semantics).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from store import errors

LOCK_NAME = "gatehouse.lock"
DB_NAME = "gatehouse.db"

#: Directories that belong to the system or to everyone: never a data directory, whatever
#: their mode (a sticky directory such as /tmp is refused on its own, see `_not_its_own`).
SYSTEM_DIRS = frozenset(
    Path("/", name)
    for name in (
        *("", "bin", "boot", "dev", "dev/shm", "etc", "home", "lib", "mnt", "opt", "proc"),
        *("root", "run", "sbin", "srv", "sys", "tmp", "usr", "var", "var/tmp"),
    )
)

#: Locks this process took early (see `claim`), by lock path, until its store adopts them.
_claimed: dict[Path, int] = {}


def parse(text: str) -> Path:
    """A data directory as given on the command line or in a setting; an empty one is an
    error rather than the working directory it would silently mean."""
    if not text.strip():
        raise errors.DataDirError(
            "the data directory is empty; give a directory of gatehouse's own, e.g. data"
        )
    return Path(text)


def _not_its_own(path: Path, info: os.stat_result) -> str | None:
    """Why `path` is a directory others share (so gatehouse must not take it over), or None.

    Its mode is not ours to change: `chmod 700 /tmp` would break every other user of it.
    """
    resolved = path.absolute().resolve()
    if info.st_mode & stat.S_ISVTX:
        return "is a shared directory (sticky bit, like /tmp)"
    if resolved in SYSTEM_DIRS:
        return "is a system directory"
    if resolved == Path.home().resolve():
        return "is the home folder"
    return None


def prepare(path: Path) -> Path:
    """Create the data directory 0700, or check an existing one.

    Refuses a symlink, a non-directory, a directory owned by someone else, one that
    the group or others can access (the store holds operator decisions and spend, and
    its files inherit the directory's exposure), and one that is not gatehouse's own
    (/, the home folder, a system or sticky directory), whose mode it must not change.
    """
    try:
        info = path.lstat()
    except FileNotFoundError:
        path.mkdir(mode=0o700, parents=True)
        info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        raise errors.DataDirError(
            f"data directory {path} is a symlink; point GATEHOUSE_DATA_DIR at the real directory"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise errors.DataDirError(f"data directory {path} exists and is not a directory")
    shared = _not_its_own(path, info)
    if shared is not None:
        raise errors.DataDirError(
            f"data directory {path} {shared}, not gatehouse's own; use a directory of its "
            f"own, e.g. {path.absolute() / 'gatehouse'}"
        )
    if info.st_uid != os.geteuid():
        raise errors.DataDirError(
            f"data directory {path} belongs to uid {info.st_uid}, not to this user ({os.geteuid()})"
        )
    if info.st_mode & 0o077:
        raise errors.DataDirError(
            f"data directory {path} is accessible to group or others "
            f"(mode {stat.S_IMODE(info.st_mode):04o}); run: chmod 700 {path}"
        )
    return path


class WriterLock:
    """An exclusive flock held for the life of the writer; the file names the holder's pid."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        claimed = _claimed.pop(self.path.resolve(), None)
        if claimed is not None:
            self._fd = claimed
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise errors.LockHeld(str(self.path), holder_pid(self.path)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)


def claim(data_dir: Path) -> None:
    """Take the writer lock now, before any slow import, so that a second instance is
    refused at once; the store that opens this directory later adopts the lock."""
    lock = WriterLock(prepare(data_dir))
    lock.acquire()
    assert lock._fd is not None
    _claimed[lock.path.resolve()] = lock._fd


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Files created inside the block are 0600 (umask 077), whatever the process umask.

    Used around the writer's first connect: SQLite creates the database file then, and
    gives its WAL and shared-memory files the database file's own mode.
    """
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def holder_pid(lock_path: Path) -> int | None:
    """The pid written by the process holding the lock, or None if unknown."""
    try:
        text = lock_path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def is_locked(data_dir: Path) -> int | None:
    """The pid of the running writer if one holds the lock, else None; never blocks."""
    path = data_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return holder_pid(path) or -1
    finally:
        os.close(fd)
    return None

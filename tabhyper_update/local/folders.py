"""The folders the SDK writes in: checked before use, its own made owner-only, kept alive by a
lease, swept only when dead, never reached through a symbolic link.

**Folder arguments** (``staging_dir``, ``output_dir``, ``state_dir`` and their command-line
flags) are checked by :func:`check_folder` before any Spark job or file write: a missing
parent, a file, a path under a file, a folder that is not writable or not readable, a full
disk, and a symbolic link that leads out of its own parent folder each give a
:class:`~tabhyper_update.values.errors.ConfigurationError` that names the path and the remedy. The
folder itself is created when missing (its parent must exist).

**Leases.** Each folder a build makes (``tabhyper-stage-*`` for Spark's staging,
``tabhyper-payload-*`` for the payload files) holds a lease file that the building process
touches every :data:`LEASE_REFRESH_SECONDS`. A leftover of a killed build is removed by a
later build's sweep only when it is dead. A lease written on this machine, in this pid
namespace, is dead when its process is gone (a pid started after the lease is another
process); while that process lives its folders stay, however old. A lease written
elsewhere (another container, another host sharing the staging path) is dead once it has
not been touched for :data:`LEASE_EXPIRY_SECONDS`: a running build keeps it fresh, so its
folder is never swept while it runs. Only folders of the sweeping
user are touched, and never through a symbolic link.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import re
import shutil
import socket
import stat
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from ..values.errors import ArgumentTypeError, ConfigurationError
from ..values.redaction import get_logger

__all__ = [
    "LEASE_EXPIRY_SECONDS",
    "LEASE_NAME",
    "LEASE_REFRESH_SECONDS",
    "LEFTOVER_SWEEP_SECONDS",
    "MIN_FREE_BYTES",
    "DerivedFolder",
    "Lease",
    "check_folder",
    "is_dead",
    "make_private",
    "private_dir",
    "refuse_symlink",
    "sweep_leftovers",
    "sweep_leftovers_if_due",
]

log = get_logger("tabhyper_update")

#: The lease file inside a build's folder.
LEASE_NAME = ".tabhyper-lease"
#: How often a running build touches its leases.
LEASE_REFRESH_SECONDS = 30.0
#: A lease untouched this long belongs to a dead build (120 missed refreshes: a paused or
#: overloaded build, or a clock that differs by minutes, is still judged alive).
LEASE_EXPIRY_SECONDS = 3600.0
#: A folder whose disk has less free space is refused before anything is written.
MIN_FREE_BYTES = 1024 * 1024
#: Payload folders without a saved manifest are removed after this long (a payload kept
#: beyond its process is marked by saving its manifest).
PAYLOAD_RETENTION_SECONDS = 86400.0
#: How often one process sweeps a folder for dead builds' leftovers when it builds: a
#: streaming job builds every few seconds, and each sweep reads every leftover's lease.
LEFTOVER_SWEEP_SECONDS = 60.0
_SWEPT: dict[str, float] = {}

_LEFTOVER = re.compile(r"^(tabhyper-stage|tabhyper-payload)-(\d+)-")


# ---------------------------------------------------------------------------------------------
# folder arguments


def make_private(folder: Path) -> None:
    """Create ``folder`` and each missing folder above it owner-only (0700), whatever the
    umask; folders that exist are left as they are."""
    missing: list[Path] = []
    for candidate in (folder, *folder.parents):
        if candidate.exists() or candidate.is_symlink():
            break
        missing.append(candidate)
    for made in reversed(missing):
        try:
            made.mkdir(mode=0o700)
        except FileExistsError:
            continue  # made meanwhile by another process: its mode is its maker's
        made.chmod(0o700)  # the umask may have taken bits off, or be odd (0o777)


def check_folder(
    path: str | os.PathLike[str] | None, what: str, *, create: bool = True
) -> Path | None:
    """Check a folder argument (``what`` names it as the caller wrote it, e.g.
    ``"staging_dir"`` or ``"--output-dir"``) and return it absolute; ``None`` stays
    ``None``. Created when missing and ``create``; refused with a
    :class:`ConfigurationError` naming the path and the remedy otherwise."""
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes):
        raise ArgumentTypeError(f"{what} must be a path (str or os.PathLike), got {path!r}")
    folder = Path(os.path.abspath(os.fspath(path)))
    shown = str(folder)
    info = _existing(folder, what, shown)
    existing = folder if info is not None else _parent(folder, what, shown)
    _check_access(existing, what, shown)
    _check_room(existing, what, shown)
    if info is None and create:
        try:
            make_private(folder)
        except FileExistsError:
            pass  # made meanwhile by another build: checked again below
        except OSError as err:
            raise _unusable(what, shown, err) from None
        if not folder.is_dir() or folder.is_symlink():
            raise ConfigurationError(f"{what} {shown!r} could not be made a folder")
    return folder


def _existing(folder: Path, what: str, shown: str) -> os.stat_result | None:
    """``folder``'s status (``None``: it does not exist), a link followed where it may be;
    refused when it is a file or cannot be read."""
    try:
        info: os.stat_result | None = os.lstat(folder)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise _under_a_file(what, shown, _file_above(folder)) from None
    except OSError as err:
        raise _unusable(what, shown, err) from None
    if info is not None and stat.S_ISLNK(info.st_mode):
        refuse_symlink(folder, what)
        info = os.stat(folder) if os.path.exists(folder) else None
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise ConfigurationError(
            f"{what} {shown!r} is a file, not a folder: pass a folder (it is created when missing)"
        )
    return info


def _parent(folder: Path, what: str, shown: str) -> Path:
    """The folder a missing ``folder`` is to be made in: it must exist, as a folder."""
    parent = folder.parent
    try:
        info = os.stat(parent)
    except FileNotFoundError:
        raise ConfigurationError(
            f"{what} {shown!r}: its parent folder {str(parent)!r} does not exist; "
            "create it first, or pass a folder whose parent exists"
        ) from None
    except NotADirectoryError:
        raise _under_a_file(what, shown, _file_above(folder)) from None
    except OSError as err:
        raise _unusable(what, shown, err) from None
    if not stat.S_ISDIR(info.st_mode):
        raise _under_a_file(what, shown, str(parent))
    return parent


def _check_room(existing: Path, what: str, shown: str) -> None:
    """Refuse a folder on a full disk (under :data:`MIN_FREE_BYTES` free)."""
    try:
        free = shutil.disk_usage(existing).free
    except OSError as err:
        raise _unusable(what, shown, err) from None
    if free < MIN_FREE_BYTES:
        raise ConfigurationError(
            f"{what} {shown!r}: its disk is full ({free:,} bytes free): free space there, or "
            "pass a folder on a disk with room"
        )


def refuse_symlink(path: Path, what: str) -> None:
    """Refuse ``path`` when it is a symbolic link that leads out of its own parent folder
    (a link within its parent, or a system alias such as ``/tmp`` on macOS, is followed)."""
    if not path.is_symlink():
        return
    target = os.path.realpath(path)
    parent = os.path.realpath(path.parent)
    if target == parent or target.startswith(parent.rstrip(os.sep) + os.sep):
        return
    raise ConfigurationError(
        f"{what} {str(path)!r} is a symbolic link to {target!r}, outside its folder "
        f"{str(path.parent)!r}: the SDK does not write through such links. Pass the real "
        "path if that is the folder you mean"
    )


def _check_access(folder: Path, what: str, shown: str) -> None:
    effective = os.access in os.supports_effective_ids
    if not os.access(folder, os.R_OK | os.X_OK, effective_ids=effective):
        raise ConfigurationError(
            f"{what} {shown!r}: {str(folder)!r} is not readable by this user; pass a folder "
            "this user can read and write"
        )
    if not os.access(folder, os.W_OK | os.X_OK, effective_ids=effective):
        why = "on a read-only file system" if _read_only(folder) else "not writable by this user"
        raise ConfigurationError(
            f"{what} {shown!r}: {str(folder)!r} is {why}; pass a folder this user can write"
        )


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _under_a_file(what: str, shown: str, file: str) -> ConfigurationError:
    return ConfigurationError(
        f"{what} {shown!r} lies under {file!r}, which is a file, not a folder: pass a folder path"
    )


def _file_above(folder: Path) -> str:
    for above in folder.parents:
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(os.stat(above).st_mode):
                return str(above)
    return str(folder.parent)


def _unusable(what: str, shown: str, err: OSError) -> ConfigurationError:
    reasons = {
        errno.EACCES: "permission denied; pass a folder this user can read and write",
        errno.EPERM: "permission denied; pass a folder this user can read and write",
        errno.EROFS: "the file system is read-only; pass a writable folder",
        errno.ENOSPC: "its disk is full; free space there, or pass a folder on another disk",
        errno.ENOTDIR: "a part of the path is a file, not a folder",
        errno.ELOOP: "a loop of symbolic links",
        errno.ENAMETOOLONG: "the path is too long",
    }
    reason = reasons.get(err.errno or 0, err.strerror or str(err))
    return ConfigurationError(f"{what} {shown!r}: {reason}")


# ---------------------------------------------------------------------------------------------
# a build's own folders and their leases


@functools.cache
def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return ""


@functools.cache
def _boot_time() -> float | None:
    """When the machine booted (epoch seconds), from ``/proc/stat``; ``None``: unknown."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        return next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    return None


def _identity() -> dict[str, object]:
    """Where this process lives: a pid is meaningful only within the same boot of the same
    machine and the same pid namespace."""
    boot = _boot_id()
    namespace = ""
    with contextlib.suppress(OSError):
        namespace = os.readlink("/proc/self/ns/pid")
    return {"host": socket.gethostname(), "boot": boot, "pid_ns": namespace, "pid": os.getpid()}


_held_lock = threading.Lock()
_held: set[Path] = set()
_keeper: list[threading.Thread] = []
_wake = threading.Event()


def _keep() -> None:
    while True:
        _wake.wait(LEASE_REFRESH_SECONDS)
        _wake.clear()
        with _held_lock:
            held = list(_held)
        for path in held:
            with contextlib.suppress(OSError):
                os.utime(path, follow_symlinks=False)


class Lease:
    """A folder's lease, touched by this process (one daemon thread for all of its
    leases) until :meth:`release`."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LEASE_NAME
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({**_identity(), "started": time.time()}, f)
        with _held_lock:
            _held.add(self.path)
            if not _keeper or not _keeper[0].is_alive():
                _keeper[:] = [threading.Thread(target=_keep, name="tabhyper-lease", daemon=True)]
                _keeper[0].start()

    def release(self) -> None:
        """Stop touching the lease (the folder is removed, or left to age)."""
        with _held_lock:
            _held.discard(self.path)


def private_dir(parent: Path | None, prefix: str) -> tuple[Path, Lease]:
    """A new owner-only folder ``<prefix><pid>-<random>`` in ``parent`` (the temporary
    folder by default) holding a fresh lease. Absolute: Spark's executors and the shared
    Hyper process have their own working directories."""
    try:
        path = Path(os.path.abspath(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent)))
    except OSError as err:
        where = str(parent or tempfile.gettempdir())
        raise _unusable("folder", where, err) from None
    try:
        path.chmod(0o700)
        return path, Lease(path)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def _holder_here(lease: Path) -> dict[str, Any] | None:
    """The build a lease names, where that lease was written on this machine (same host,
    boot and pid namespace); ``None`` for any other or an unreadable one."""
    try:
        holder = json.loads(lease.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    here = _identity()
    if not isinstance(holder, dict) or not isinstance(holder.get("pid"), int):
        return None
    if all(holder.get(k) == here[k] and here[k] for k in ("host", "boot", "pid_ns")):
        return holder
    return None


def _holder_gone(holder: dict[str, Any]) -> bool:
    """Whether the process a lease written here names is gone: a pid started after the
    lease is another process."""
    started = _process_start(holder["pid"])
    lease_started = holder.get("started")
    if started is None or not isinstance(lease_started, (int, float)):
        return True
    return bool(started > lease_started + 1.0)


def is_dead(folder: Path, now: float | None = None) -> bool:
    """Whether the build that made ``folder`` is gone (see the module's docstring)."""
    now = time.time() if now is None else now
    lease = folder / LEASE_NAME
    try:
        info = os.lstat(lease)
    except FileNotFoundError:
        # Killed before its lease was written (or made by an older version): its age says.
        try:
            return now - os.lstat(folder).st_mtime > LEASE_EXPIRY_SECONDS
        except OSError:
            return False
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode):
        return False  # not a lease of ours: leave the folder alone
    holder = _holder_here(lease)
    if holder is not None:
        # Written here: its process decides, whatever the lease's age (a payload can be
        # kept for long after its build).
        return _holder_gone(holder)
    return now - info.st_mtime > LEASE_EXPIRY_SECONDS


def _process_start(pid: int) -> float | None:
    """When process ``pid`` started (epoch seconds), ``None`` when there is none."""
    boot = _boot_time()
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        stat_line = ""
    if boot is None or not stat_line:
        return None if not _alive(pid) else 0.0  # no /proc: alive is all that is known
    ticks = int(stat_line.rsplit(")", 1)[1].split()[19])
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def sweep_leftovers_if_due(parent: str | os.PathLike[str] | None) -> int:
    """:func:`sweep_leftovers`, at most every :data:`LEFTOVER_SWEEP_SECONDS` per folder and
    process."""
    key = os.path.abspath(parent) if parent is not None else tempfile.gettempdir()
    now = time.monotonic()
    last = _SWEPT.get(key)
    if last is not None and now - last < LEFTOVER_SWEEP_SECONDS:
        return 0
    _SWEPT[key] = now
    return sweep_leftovers(parent)


def sweep_leftovers(parent: str | os.PathLike[str] | None) -> int:
    """Remove what dead builds left in ``parent`` (the temporary folder by default): their
    staging folders, unfinished ``.part-*.hyper.tmp`` files in their payload folders, and
    payload folders older than :data:`PAYLOAD_RETENTION_SECONDS` that hold no
    ``manifest.json``. Only real folders (not links) of this user whose build is dead
    (:func:`is_dead`) are touched. Returns how many entries were removed."""
    folder = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    removed = 0
    try:
        entries = list(folder.iterdir())
    except OSError:
        return 0
    now = time.time()
    for entry in entries:
        found = _dead_build(entry, now)
        if found is not None:
            removed += _swept(entry, *found, now)
    if removed:
        log.info("removed %d leftover(s) of dead builds in %s", removed, folder)
    return removed


def _dead_build(entry: Path, now: float) -> tuple[str, os.stat_result] | None:
    """What ``entry`` is (``tabhyper-stage`` or a payload folder) and its ``lstat``, where it
    is a real folder of this user's, of a build that is dead; ``None`` for anything else."""
    match = _LEFTOVER.match(entry.name)
    if match is None:
        return None
    try:
        info = entry.lstat()
    except OSError:
        return None
    ours = stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
    return (match.group(1), info) if ours and is_dead(entry, now) else None


def _swept(entry: Path, kind: str, info: os.stat_result, now: float) -> int:
    """Remove what a dead build left in its folder ``entry``: a staging folder whole, a
    payload folder whole where it holds no manifest past the retention, else its unfinished
    part files (and the folder, where only its lease is left). How many were removed."""
    manifest = entry / "manifest.json"
    if kind == "tabhyper-stage" or (
        not manifest.exists() and now - info.st_mtime > PAYLOAD_RETENTION_SECONDS
    ):
        shutil.rmtree(entry, ignore_errors=True)
        return 1
    removed = 0
    for tmp in entry.glob(".part-*.hyper.tmp"):
        with contextlib.suppress(OSError):
            if tmp.is_file() and not tmp.is_symlink():
                tmp.unlink()
                removed += 1
    with contextlib.suppress(OSError):
        if [p.name for p in entry.iterdir()] == [LEASE_NAME]:  # a kept payload stays
            (entry / LEASE_NAME).unlink()
            entry.rmdir()
    return removed


class DerivedFolder:
    """An owner-only folder of the SDK's own for files derived from a caller's (made on
    first use, never beside the caller's files), removed by :meth:`remove` or when this
    object is collected (with whatever holds it)."""

    def __init__(self, prefix: str = "tabhyper-payload-") -> None:
        self._prefix = prefix
        self._path: Path | None = None
        self._gone: weakref.finalize[Any, Any] | None = None

    def __call__(self) -> Path:
        """The folder (made now if it was not)."""
        if self._path is None:
            self._path, lease = private_dir(None, self._prefix)
            self._gone = weakref.finalize(self, _remove_leased, self._path, lease)
        return self._path

    def remove(self) -> None:
        if self._gone is not None:
            self._gone()


def _remove_leased(folder: Path, lease: Lease) -> None:
    lease.release()
    shutil.rmtree(folder, ignore_errors=True)

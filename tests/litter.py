"""What a test run wrote where it should not.

In the repository: a snapshot of every file and folder below the root (also the ones .gitignore hides, so an
ignored tree such as umad2sim's ./sys-PID still counts), compared after the run.
Elsewhere (the real home folder, /etc, /usr/local, ...): the names there before and after, and the files
whose mtime is newer than the run's start.  The run's own HOME, XDG folders and TMPDIR are one scratch
folder (tests/conftest.py), so a tool that keeps caches or settings in the home folder writes into that.

Other programs change those places too while a run goes on (a user added, a package installed), so a change
there counts against the run only if a process of the run wrote it (Writes): the run works in a mount
namespace of its own, and the kernel reports every file that a process in it wrote.  What the kernel cannot
attribute (a removal, a folder made with nothing written into it, a write by a process that entered yet
another mount namespace, such as `ip netns exec` or `unshare -m` start) is listed as a note, not a failure."""

import ctypes
import os
import select
import struct
import threading
from pathlib import Path

SKIP = {".git", ".venv"}  # git's own store and the developer's virtualenv (pip writes there)

# Places outside any temporary folder that a test, or a tool a test runs, could write into (besides the
# home folder): system settings, software installed by hand, caches, and the root folder's own entries.
OUTSIDE = ["/", "/etc", "/usr/local", "/opt", "/var/tmp", "/var/cache", "/srv"]
# ... except what the system's own timers rewrite at any time (apt's and man's caches on a Debian machine).
SYSTEM = ["/var/cache/apt", "/var/cache/man", "/var/cache/debconf", "/var/cache/ldconfig"]
# What tests keep between runs on purpose: tests/test_fresh_debian.py's debootstrapped Debian.
CACHE = "/var/cache/ibwire-tests"


def snapshot(root: Path) -> dict:
    """Relative path -> (size, mtime in ns) of each file, None for each folder."""
    seen = {}
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP]
        rel = os.path.relpath(top, root)
        for d in dirs:
            seen[os.path.normpath(os.path.join(rel, d))] = None
        for f in files:
            p = os.path.join(top, f)
            try:
                st = os.lstat(p)
            except FileNotFoundError:  # removed while we looked
                continue
            seen[os.path.normpath(os.path.join(rel, f))] = (st.st_size, st.st_mtime_ns)
    return seen


def changes(before: dict, after: dict) -> list:
    """'created X', 'deleted X', 'modified X' lines, a created folder standing for what is inside it."""
    created = sorted(set(after) - set(before))
    out, parents = [], set()
    for p in created:
        if any(p.startswith(d + os.sep) for d in parents):
            continue
        if after[p] is None:
            parents.add(p)
        out.append(f"created {p}")
    out += [f"deleted {p}" for p in sorted(set(before) - set(after))]
    out += [f"modified {p}" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    return out


def outside(places, since=None, leave=()) -> dict:
    """Path -> None for each folder, 0 or 1 for anything else, of all that is below `places` ("/": its own
    entries only) and not below one of `leave`; 1 for a file changed at or after `since` (seconds, as
    time.time(), against its mtime: a copy may keep an old one, but then its name is new).  Without `since`,
    names only, quickly.  Two of them compared with changes(): what a run created, deleted or changed."""
    leave = tuple(os.path.realpath(p).rstrip("/") + "/" for p in leave)
    since_ns = None if since is None else int(since * 1e9)
    seen = {}

    def look(folder, deep):
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:  # gone, unreadable, or not a folder
            return
        for e in entries:
            if (e.path + "/").startswith(leave):
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    seen[e.path] = None
                    if deep:
                        look(e.path, True)
                else:
                    seen[e.path] = int(since_ns is not None and e.stat(follow_symlinks=False).st_mtime_ns >= since_ns)
            except OSError:  # removed while we looked
                continue

    for place in places:
        place = os.path.realpath(place)
        look(place, place != "/")
    return seen


class Writes:
    """The files that processes of this run closed after writing, in `places` (their mounts).

    The calling process moves into a mount namespace of its own (unshare(2); a copy of the machine's mounts,
    same files, same propagation) before it starts any thread or process, and fanotify(7) watches its copies
    of the mounts holding `places` for FAN_CLOSE_WRITE: a mount mark sees only accesses through that mount,
    so the kernel reports what this process and its children write, and nothing another program writes,
    whenever it does.  Files are known by their handle (name_to_handle_at(2)), which survives a rename.
    `off` is why there is no attribution (not root, ...), or ''."""

    def __init__(self, places):
        self.seen, self.off, self.lock = set(), "", threading.Lock()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
        self.libc = libc
        # FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE | FAN_REPORT_FID
        if libc.unshare(0x00020000) != 0 or (fd := libc.fanotify_init(0x213, os.O_RDONLY)) < 0:
            self.off = f"no mount namespace and fanotify for the run: {os.strerror(ctypes.get_errno())}"
            return
        for place in places:  # FAN_MARK_ADD | FAN_MARK_MOUNT, FAN_CLOSE_WRITE
            if os.path.isdir(place) and libc.fanotify_mark(fd, 0x11, 0x8, -100, os.fsencode(place)) != 0:
                self.off = f"fanotify cannot watch {place}: {os.strerror(ctypes.get_errno())}"
                return
        self.fd = fd
        threading.Thread(target=self._follow, daemon=True, name="litter-writes").start()

    def _follow(self):
        while True:
            select.select([self.fd], [], [])
            self.take()

    def take(self):
        """Read the events queued so far."""
        with self.lock:
            while True:
                try:
                    buf = os.read(self.fd, 1 << 16)
                except BlockingIOError:
                    return
                at = 0
                while at < len(buf):
                    size, _, _, meta = struct.unpack_from("IBBH", buf, at)
                    info = at + meta  # fanotify_event_info_fid: header, fsid, file_handle
                    nbytes, kind = struct.unpack_from("Ii", buf, info + 12)
                    self.seen.add((kind, buf[info + 20 : info + 20 + nbytes]))
                    at += size

    def wrote(self, path) -> bool:
        """Whether a process of the run wrote the file at `path` (or, for a folder, any file below it)."""
        if os.path.isdir(path) and not os.path.islink(path):
            return any(self.wrote(os.path.join(top, f)) for top, _, files in os.walk(path) for f in files)
        handle = ctypes.create_string_buffer(struct.pack("Ii", 128, 0), 8 + 128)
        mount_id = ctypes.c_int()
        if self.libc.name_to_handle_at(-100, os.fsencode(path), handle, ctypes.byref(mount_id), 0) != 0:
            return False
        nbytes, kind = struct.unpack_from("Ii", handle.raw)
        return (kind, handle.raw[8 : 8 + nbytes]) in self.seen

    def blame(self, found: list) -> tuple:
        """changes() lines split into those a process of the run made and the others; all are the run's
        when attribution is off."""
        if self.off:
            return found, []
        self.take()
        mine = [c for c in found if not c.startswith("deleted ") and self.wrote(c.split(" ", 1)[1])]
        return mine, [c for c in found if c not in mine]

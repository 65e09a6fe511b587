"""A throttled passthrough filesystem (FUSE, mfusepy) standing in for slow shared storage.

All writers share one token bucket of ``MBPS`` MB/s, and every open/create/rename pays
``LATENCY_MS`` (per-request latency), like a busy NFS/Lustre mount. Run as a process:
``python bench/throttlefs.py BACKING_DIR MOUNTPOINT MBPS LATENCY_MS``.
"""
from __future__ import annotations

import errno
import os
import sys
import threading
import time

import mfusepy as fuse


class Throttled(fuse.Operations):
    def __init__(self, root: str, mbps: float, latency_ms: float) -> None:
        self.root, self.rate, self.lat = root, mbps * 1e6, latency_ms / 1e3
        self._mu = threading.Lock()
        self.next_free = time.monotonic()

    def _p(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _pay(self, nbytes: int) -> None:
        with self._mu:  # one shared pipe: transfers queue behind each other
            start = max(time.monotonic(), self.next_free)
            self.next_free = start + nbytes / self.rate
            wait = self.next_free - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def getattr(self, path, fh=None):
        try:
            st = os.lstat(self._p(path))
        except FileNotFoundError:
            raise fuse.FuseOSError(errno.ENOENT)
        return {k: getattr(st, k) for k in ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime",
                                            "st_nlink", "st_size", "st_uid")}

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._p(path))

    def mkdir(self, path, mode):
        time.sleep(self.lat)
        return os.mkdir(self._p(path), mode)

    def create(self, path, mode, fi=None):
        time.sleep(self.lat)
        return os.open(self._p(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

    def open(self, path, flags):
        time.sleep(self.lat)
        return os.open(self._p(path), flags)

    def read(self, path, size, offset, fh):
        self._pay(size)
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        self._pay(len(data))
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        os.truncate(self._p(path), length)

    def rename(self, old, new):
        time.sleep(self.lat)
        return os.rename(self._p(old), self._p(new))

    def unlink(self, path):
        return os.unlink(self._p(path))

    def rmdir(self, path):
        return os.rmdir(self._p(path))

    def chmod(self, path, mode):
        return os.chmod(self._p(path), mode)

    def utimens(self, path, times=None):
        return os.utime(self._p(path), times)

    def release(self, path, fh):
        return os.close(fh)

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        return 0


if __name__ == "__main__":
    backing, mnt, mbps, lat = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
    fuse.FUSE(Throttled(backing, mbps, lat), mnt, foreground=True, nothreads=False, big_writes=True)

#!/usr/bin/env python3
"""Disk load like a backup's, to measure what each part of it costs durable writes
(docs/benchmarks.md, "Backup and restore"): 4 MiB chunks read, or written with a choice of write-out.

usage: scripts/disk-load.py read FILE... [--idle]
       scripts/disk-load.py write FILE MIB [--sync MIB] [--sfr MIB] [--direct] [--idle] [--rate MIB_PER_S]

--sync: fdatasync every MIB; --sfr: sync_file_range every MIB (start the write-out of the range,
wait for the one before); --direct: O_DIRECT; --idle: IO priority class idle (ioprio_set);
--rate: at most this many MiB/s. Prints the MiB moved and the rate.
"""
import ctypes
import os
import sys
import time

LIBC = ctypes.CDLL(None, use_errno=True)
CHUNK = 4 << 20
SYS_IOPRIO_SET, IOPRIO_WHO_PROCESS, IOPRIO_CLASS_IDLE = 251, 1, 3
SFR_WAIT_BEFORE, SFR_WRITE, SFR_WAIT_AFTER = 1, 2, 4


def take(args, name, value=True):
    if name not in args:
        return None
    i = args.index(name)
    got = float(args[i + 1]) if value else True
    del args[i:i + (2 if value else 1)]
    return got


def sync_range(fd, start, length, flags):
    if LIBC.sync_file_range(fd, ctypes.c_int64(start), ctypes.c_int64(length), flags) != 0:
        raise OSError(ctypes.get_errno(), "sync_file_range")


def read(paths):
    done = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(CHUNK):
                done += len(chunk)
    return done


def write(path, mib, sync, sfr, direct, rate, started):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0), 0o644)
    raw = ctypes.create_string_buffer(CHUNK + 4096)  # O_DIRECT wants an aligned buffer
    buf = memoryview((ctypes.c_char * CHUNK).from_address((ctypes.addressof(raw) + 4095) & ~4095)).cast("B")
    buf[:] = b"x" * CHUNK
    done, started_out, previous = 0, 0, None
    for _ in range(int(mib) // 4):
        os.write(fd, buf)
        done += CHUNK
        if sfr and done - started_out >= sfr * 2**20:
            sync_range(fd, started_out, done - started_out, SFR_WRITE)
            if previous:
                sync_range(fd, *previous, SFR_WAIT_BEFORE | SFR_WRITE | SFR_WAIT_AFTER)
            previous, started_out = (started_out, done - started_out), done
        if sync and done % int(sync * 2**20) == 0:
            os.fdatasync(fd)
        if rate and (due := done / (rate * 2**20) - (time.time() - started)) > 0:
            time.sleep(due)
    os.fsync(fd)
    os.close(fd)
    return done


def main(args):
    idle = take(args, "--idle", value=False)
    sync, sfr, rate, direct = take(args, "--sync"), take(args, "--sfr"), take(args, "--rate"), take(args, "--direct", value=False)
    if len(args) < 2 or args[0] not in ("read", "write") or (args[0] == "write" and len(args) != 3):
        sys.exit(__doc__)
    if idle and LIBC.syscall(SYS_IOPRIO_SET, IOPRIO_WHO_PROCESS, 0, IOPRIO_CLASS_IDLE << 13) != 0:
        raise OSError(ctypes.get_errno(), "ioprio_set")
    started = time.time()
    done = read(args[1:]) if args[0] == "read" else write(args[1], args[2], sync, sfr, direct, rate, started)
    took = time.time() - started
    print(f"{done / 2**20:.0f} MiB in {took:.2f} s = {done / 2**20 / took:.0f} MiB/s")


if __name__ == "__main__":
    main(sys.argv[1:])

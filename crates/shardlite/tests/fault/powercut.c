/* An LD_PRELOAD shim for the power-loss test (tests/power_loss/main.rs): it records every file-system
 * operation that `shardlite serve` makes on files under one directory, so that the test can
 * rebuild, for any moment T, the directory as a power cut at T could have left it
 * (tests/power_loss/disk.rs holds that model).
 *
 * Environment:
 *   SHARDLITE_POWERCUT_DIR  the data directory to watch (an absolute path without symlinks)
 *   SHARDLITE_POWERCUT_LOG  where to append the records (must be outside that directory)
 * Without both, every call passes through untouched.
 *
 * The real call always goes through (dlsym(RTLD_NEXT)) with the caller's arguments, and the
 * caller gets its result and errno unchanged: the shim observes, it never decides. A call is
 * recorded after it returned, and only if it succeeded: a failed write wrote nothing, a failed
 * fsync made nothing durable.
 *
 * Record format (native byte order, x86-64 little-endian; parsed by tests/power_loss/log.rs):
 *
 *   offset size field
 *   0      4    len: bytes after this field (52 + n1 + n2)
 *   4      1    kind (K_* below)
 *   5      1    call (C_* below): which libc function it was
 *   6      1    flags (F_* below)
 *   7      1    0
 *   8      8    t_start: CLOCK_MONOTONIC ns just before the real call
 *   16     8    t_end: CLOCK_MONOTONIC ns just after it returned
 *   24     8    ino: the inode the call was about (0 if none)
 *   32     8    a: K_OPEN the open flags; K_WRITE the file offset; K_SIZE the new size;
 *                  K_RENAME renameat2's flags; K_SYNC msync's address or sync_file_range's offset
 *   40     8    b: K_OPEN the size after opening; K_SYNC msync's or sync_file_range's length
 *   48     4    n1: bytes of the first variable part (a path)
 *   52     4    n2: bytes of the second variable part (a second path, or the written data)
 *   56     n1   path (K_OPEN, K_RENAME source, K_UNLINK)
 *   56+n1  n2   K_RENAME destination, or K_WRITE data
 *
 * Each record is appended with one writev() under a mutex, so records never interleave, and
 * the log survives the SIGKILL that ends the run (the kernel has it; no power is lost here).
 *
 * File descriptors are mapped to watched files by a table filled at open and cleared at close;
 * a descriptor the table does not know (a socket, a dup, one opened before the shim was ready)
 * is resolved once through /proc/self/fd, so nothing written under the directory is missed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef RWF_APPEND
#define RWF_APPEND 0x10
#endif

enum { K_OPEN = 1, K_WRITE = 2, K_SIZE = 3, K_RENAME = 4, K_UNLINK = 5, K_SYNC = 6 };

enum {
    C_OPEN = 1, C_OPEN64, C_OPENAT, C_OPENAT64, C_CREAT, C_CREAT64,
    C_WRITE, C_PWRITE, C_PWRITE64, C_WRITEV, C_PWRITEV, C_PWRITEV64, C_PWRITEV2, C_PWRITEV64V2,
    C_FTRUNCATE, C_FTRUNCATE64, C_TRUNCATE, C_TRUNCATE64, C_FALLOCATE, C_FALLOCATE64,
    C_POSIX_FALLOCATE, C_POSIX_FALLOCATE64,
    C_RENAME, C_RENAMEAT, C_RENAMEAT2, C_UNLINK, C_UNLINKAT, C_REMOVE,
    C_FSYNC, C_FDATASYNC, C_SYNCFS, C_SYNC, C_SYNC_FILE_RANGE, C_MSYNC
};

/* K_OPEN: the call created the file / cut it to zero; K_OPEN, K_SYNC: it is the directory. */
enum { F_CREATED = 1, F_TRUNCATED = 2, F_DIRECTORY = 4 };

struct header {
    uint32_t len;
    uint8_t kind, call, flags, zero;
    uint64_t t_start, t_end, ino;
    int64_t a, b;
    uint32_t n1, n2;
};
_Static_assert(sizeof(struct header) == 56, "the record header is 56 bytes");

/* What the table knows of a descriptor. */
enum { FD_UNKNOWN = 0, FD_OTHER = 1, FD_WATCHED = 2 };
#define FD_TABLE 65536
static uint8_t fd_state[FD_TABLE];
static uint64_t fd_ino[FD_TABLE];
static uint8_t fd_append[FD_TABLE];
static uint8_t fd_dir[FD_TABLE];

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = -1;
static char dir[PATH_MAX];
static size_t dir_len;

/* The real functions, each looked up on first use: a lookup must not wait for the shim's
 * set-up (init), which itself calls some of them. Racing threads store the same pointer. */
#define REAL(name) static __typeof__(name) *real_##name
#define R(name)                                                                                  \
    (__atomic_load_n(&real_##name, __ATOMIC_RELAXED)                                             \
         ? real_##name                                                                           \
         : (__atomic_store_n(&real_##name, (__typeof__(real_##name))dlsym(RTLD_NEXT, #name),     \
                             __ATOMIC_RELAXED),                                                  \
            real_##name))
REAL(open); REAL(open64); REAL(openat); REAL(openat64); REAL(creat); REAL(creat64);
REAL(write); REAL(pwrite); REAL(pwrite64); REAL(writev); REAL(pwritev); REAL(pwritev64);
REAL(pwritev2); REAL(pwritev64v2);
REAL(ftruncate); REAL(ftruncate64); REAL(truncate); REAL(truncate64);
REAL(fallocate); REAL(fallocate64); REAL(posix_fallocate); REAL(posix_fallocate64);
REAL(rename); REAL(renameat); REAL(renameat2); REAL(unlink); REAL(unlinkat); REAL(remove);
REAL(fsync); REAL(fdatasync); REAL(syncfs); REAL(sync); REAL(sync_file_range); REAL(msync);
REAL(close); REAL(dup2); REAL(dup3);

/* Reads the environment and opens the log, once. */
static void init(void) {
    const char *d = getenv("SHARDLITE_POWERCUT_DIR");
    const char *l = getenv("SHARDLITE_POWERCUT_LOG");
    if (!d || !l || strlen(d) >= sizeof dir || d[0] != '/') return;
    strcpy(dir, d);
    dir_len = strlen(dir);
    while (dir_len > 1 && dir[dir_len - 1] == '/') dir[--dir_len] = 0;
    /* The log is opened through the real open, so it is never recorded itself. */
    log_fd = R(open)(l, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static int active(void) {
    pthread_once(&once, init);
    return log_fd >= 0;
}

/* Set up at load, before the program's threads start. */
__attribute__((constructor)) static void start(void) { active(); }

static uint64_t now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Whether an absolute path is the directory or inside it. */
static int watched_path(const char *abs) {
    return strncmp(abs, dir, dir_len) == 0 && (abs[dir_len] == 0 || abs[dir_len] == '/');
}

/* Removes "." and ".." components and repeated slashes from an absolute path, in place. */
static void normalize(char *path) {
    char *out = path; /* the result so far, always starting with '/' */
    const char *in = path;
    while (*in) {
        while (*in == '/') in++;
        const char *end = in;
        while (*end && *end != '/') end++;
        size_t len = (size_t)(end - in);
        if (len == 0 || (len == 1 && in[0] == '.')) {
            /* nothing */
        } else if (len == 2 && in[0] == '.' && in[1] == '.') {
            while (out > path && *--out != '/') {
            }
        } else {
            *out++ = '/';
            memmove(out, in, len);
            out += len;
        }
        in = end;
    }
    if (out == path) *out++ = '/';
    *out = 0;
}

/* `path` as a normalized absolute path (relative ones against `dirfd`, or the working
 * directory), in `out`; 0 if it cannot be made absolute. No symlinks are resolved: the server
 * is given the directory's real path, and SQLite and Rust join file names onto it. */
static int absolute(int dirfd, const char *path, char *out, size_t size) {
    if (!path) return 0;
    if (path[0] == '/') {
        if (strlen(path) >= size) return 0;
        strcpy(out, path);
        normalize(out);
        return 1;
    }
    char base[PATH_MAX];
    if (dirfd == AT_FDCWD) {
        if (!getcwd(base, sizeof base)) return 0;
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        ssize_t n = readlink(link, base, sizeof base - 1);
        if (n < 0) return 0;
        base[n] = 0;
    }
    if (snprintf(out, size, "%s/%s", base, path) >= (int)size) return 0;
    normalize(out);
    return 1;
}

/* A record the shim cannot write whole would make the log lie: better no run than a wrong one. */
static void give_up(const char *why) {
    static const char prefix[] = "powercut shim: ";
    R(write)(2, prefix, sizeof prefix - 1);
    R(write)(2, why, strlen(why));
    R(write)(2, "\n", 1);
    abort();
}

/* Most pieces of one record: header, two paths, the written buffers. The server writes at most
 * a few buffers at once (IOV_MAX is 1024). */
#define MAX_PARTS 64

static void record(uint8_t kind, uint8_t call, uint8_t flags, uint64_t t0, uint64_t t1, uint64_t ino, int64_t a,
                   int64_t b, const char *p1, const char *p2, const struct iovec *data, int ndata) {
    struct header h = {0};
    h.kind = kind;
    h.call = call;
    h.flags = flags;
    h.t_start = t0;
    h.t_end = t1;
    h.ino = ino;
    h.a = a;
    h.b = b;
    struct iovec parts[MAX_PARTS];
    int n = 0;
    parts[n].iov_base = &h;
    parts[n++].iov_len = sizeof h;
    if (p1) {
        h.n1 = (uint32_t)strlen(p1);
        parts[n].iov_base = (void *)p1;
        parts[n++].iov_len = h.n1;
    }
    if (p2) {
        h.n2 = (uint32_t)strlen(p2);
        parts[n].iov_base = (void *)p2;
        parts[n++].iov_len = h.n2;
    }
    if (ndata > MAX_PARTS - n) give_up("a write of more buffers than the shim records");
    for (int i = 0; i < ndata; i++) {
        h.n2 += (uint32_t)data[i].iov_len;
        parts[n++] = data[i];
    }
    size_t total = sizeof h + h.n1 + h.n2;
    h.len = (uint32_t)(total - sizeof h.len);
    pthread_mutex_lock(&log_lock);
    ssize_t written = R(writev)(log_fd, parts, n);
    pthread_mutex_unlock(&log_lock);
    if (written != (ssize_t)total) give_up("could not append a record to the log");
}

/* Learns what `fd` is (from /proc/self/fd) and remembers it; returns its state. */
static int resolve(int fd) {
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    int state = FD_OTHER;
    struct stat st;
    if (n > 0) {
        path[n] = 0;
        if (path[0] == '/' && watched_path(path) && fstat(fd, &st) == 0) {
            state = FD_WATCHED;
            if (fd < FD_TABLE) {
                fd_ino[fd] = (uint64_t)st.st_ino;
                fd_dir[fd] = S_ISDIR(st.st_mode);
                fd_append[fd] = (fcntl(fd, F_GETFL) & O_APPEND) != 0;
            }
        }
    }
    if (fd >= 0 && fd < FD_TABLE) __atomic_store_n(&fd_state[fd], (uint8_t)state, __ATOMIC_RELEASE);
    return state;
}

/* Whether `fd` is a watched file; if so its inode, directory flag and O_APPEND. */
static int watched_fd(int fd, uint64_t *ino, int *is_dir, int *append_mode) {
    if (fd < 0 || !active()) return 0;
    int state = fd < FD_TABLE ? __atomic_load_n(&fd_state[fd], __ATOMIC_ACQUIRE) : FD_UNKNOWN;
    if (state == FD_UNKNOWN) state = resolve(fd);
    if (state != FD_WATCHED) return 0;
    if (fd < FD_TABLE) {
        *ino = fd_ino[fd];
        if (is_dir) *is_dir = fd_dir[fd];
        if (append_mode) *append_mode = fd_append[fd];
    } else {
        struct stat st;
        if (fstat(fd, &st) != 0) return 0;
        *ino = (uint64_t)st.st_ino;
        if (is_dir) *is_dir = S_ISDIR(st.st_mode);
        if (append_mode) *append_mode = (fcntl(fd, F_GETFL) & O_APPEND) != 0;
    }
    return 1;
}

static void forget(int fd) {
    if (fd >= 0 && fd < FD_TABLE) __atomic_store_n(&fd_state[fd], (uint8_t)FD_UNKNOWN, __ATOMIC_RELEASE);
}

/* ---- opening ---- */

/* Every open goes through here: `call_real` performs the real call. */
static int opened(int dirfd, const char *path, int flags, uint8_t call, uint64_t t0, int fd, int existed) {
    int saved = errno;
    char abs[PATH_MAX];
    if (fd >= 0) forget(fd);
    if (fd >= 0 && absolute(dirfd, path, abs, sizeof abs) && watched_path(abs)) {
        uint64_t t1 = now();
        struct stat st;
        if (fstat(fd, &st) == 0) {
            uint8_t f = 0;
            if ((flags & O_CREAT) && !existed) f |= F_CREATED;
            if ((flags & O_TRUNC) && existed) f |= F_TRUNCATED;
            if (S_ISDIR(st.st_mode)) f |= F_DIRECTORY;
            if (fd < FD_TABLE) {
                fd_ino[fd] = (uint64_t)st.st_ino;
                fd_dir[fd] = S_ISDIR(st.st_mode);
                fd_append[fd] = (flags & O_APPEND) != 0;
                __atomic_store_n(&fd_state[fd], (uint8_t)FD_WATCHED, __ATOMIC_RELEASE);
            }
            record(K_OPEN, call, f, t0, t1, (uint64_t)st.st_ino, flags, (int64_t)st.st_size, abs, NULL, NULL, 0);
        }
    } else if (fd >= 0 && fd < FD_TABLE) {
        __atomic_store_n(&fd_state[fd], (uint8_t)FD_OTHER, __ATOMIC_RELEASE);
    }
    errno = saved;
    return fd;
}

/* Before an open of a watched path that may create or truncate: whether the file exists. */
static int exists_before(int dirfd, const char *path, int flags) {
    char abs[PATH_MAX];
    if (!(flags & (O_CREAT | O_TRUNC)) || !active() || !absolute(dirfd, path, abs, sizeof abs) || !watched_path(abs))
        return 1;
    struct stat st;
    int saved = errno;
    int found = lstat(abs, &st) == 0;
    errno = saved;
    return found;
}

static mode_t mode_arg(int flags, va_list ap) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

/* The mode of an open(2) that creates: its variadic third argument. */
#define MODE_ARG                                                                  \
    mode_t mode;                                                                  \
    {                                                                             \
        va_list ap;                                                               \
        va_start(ap, flags);                                                      \
        mode = mode_arg(flags, ap);                                               \
        va_end(ap);                                                               \
    }

#define OPEN_BODY(callid, realcall, dirfd)                                        \
    if (!active()) return realcall;                                               \
    int existed = exists_before(dirfd, path, flags);                              \
    uint64_t t0 = now();                                                          \
    int fd = realcall;                                                            \
    return opened(dirfd, path, flags, callid, t0, fd, existed)

int open(const char *path, int flags, ...) {
    MODE_ARG;
    OPEN_BODY(C_OPEN, R(open)(path, flags, mode), AT_FDCWD);
}

int open64(const char *path, int flags, ...) {
    MODE_ARG;
    OPEN_BODY(C_OPEN64, R(open64)(path, flags, mode), AT_FDCWD);
}

int openat(int dirfd, const char *path, int flags, ...) {
    MODE_ARG;
    OPEN_BODY(C_OPENAT, R(openat)(dirfd, path, flags, mode), dirfd);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    MODE_ARG;
    OPEN_BODY(C_OPENAT64, R(openat64)(dirfd, path, flags, mode), dirfd);
}

/* The _FORTIFY_SOURCE entry points for two-argument opens. */
int __open_2(const char *path, int flags) { return open(path, flags); }
int __open64_2(const char *path, int flags) { return open64(path, flags); }
int __openat_2(int dirfd, const char *path, int flags) { return openat(dirfd, path, flags); }
int __openat64_2(int dirfd, const char *path, int flags) { return openat64(dirfd, path, flags); }

int creat(const char *path, mode_t mode) {
    int flags = O_CREAT | O_WRONLY | O_TRUNC;
    OPEN_BODY(C_CREAT, R(creat)(path, mode), AT_FDCWD);
}

int creat64(const char *path, mode_t mode) {
    int flags = O_CREAT | O_WRONLY | O_TRUNC;
    OPEN_BODY(C_CREAT64, R(creat64)(path, mode), AT_FDCWD);
}

int close(int fd) {
    forget(fd);
    return R(close)(fd);
}

int dup2(int oldfd, int newfd) {
    int r = R(dup2)(oldfd, newfd);
    if (r >= 0) forget(r);
    return r;
}

int dup3(int oldfd, int newfd, int flags) {
    int r = R(dup3)(oldfd, newfd, flags);
    if (r >= 0) forget(r);
    return r;
}

/* ---- data ---- */

/* Where a write() or writev() on `fd` will land: the end for O_APPEND, else the position. */
static off_t position(int fd, int append_mode) {
    if (append_mode) {
        struct stat st;
        return fstat(fd, &st) == 0 ? st.st_size : -1;
    }
    return lseek(fd, 0, SEEK_CUR);
}

/* Records `written` bytes of `iov` (a write that returned `written`) at `offset`. */
static void record_write(uint8_t call, uint64_t t0, uint64_t ino, off_t offset, const struct iovec *iov, int iovcnt,
                         ssize_t written) {
    int saved = errno;
    uint64_t t1 = now();
    struct iovec data[MAX_PARTS];
    int n = 0;
    size_t left = (size_t)written;
    for (int i = 0; i < iovcnt && left > 0; i++) {
        if (n == MAX_PARTS - 1) give_up("a write of more buffers than the shim records");
        size_t take = iov[i].iov_len < left ? iov[i].iov_len : left;
        data[n].iov_base = iov[i].iov_base;
        data[n++].iov_len = take;
        left -= take;
    }
    record(K_WRITE, call, 0, t0, t1, ino, (int64_t)offset, 0, NULL, NULL, data, n);
    errno = saved;
}

/* One body for every write: `at` (an expression of `offset`, `append_mode`, `flags`...) is where
 * the bytes land, computed once the descriptor is known to be watched. */
#define WRITE_BODY(callid, realcall, at, iov, iovcnt)                             \
    uint64_t ino;                                                                 \
    int append_mode;                                                              \
    if (!watched_fd(fd, &ino, NULL, &append_mode)) return realcall;               \
    off_t where = (at);                                                           \
    uint64_t t0 = now();                                                          \
    ssize_t r = realcall;                                                         \
    if (r > 0) record_write(callid, t0, ino, where, iov, iovcnt, r);              \
    return r

/* pwritev2 with offset -1 (or an appending descriptor or flag) writes at the file position,
 * like writev, and moves it. */
#define V2_AT (offset == -1 || append_mode || (flags & RWF_APPEND) ? position(fd, append_mode || (flags & RWF_APPEND)) : offset)

ssize_t write(int fd, const void *buf, size_t count) {
    struct iovec one = {(void *)buf, count};
    WRITE_BODY(C_WRITE, R(write)(fd, buf, count), position(fd, append_mode), &one, 1);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    struct iovec one = {(void *)buf, count};
    WRITE_BODY(C_PWRITE, R(pwrite)(fd, buf, count, offset), offset, &one, 1);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
    struct iovec one = {(void *)buf, count};
    WRITE_BODY(C_PWRITE64, R(pwrite64)(fd, buf, count, offset), offset, &one, 1);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    WRITE_BODY(C_WRITEV, R(writev)(fd, iov, iovcnt), position(fd, append_mode), iov, iovcnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    WRITE_BODY(C_PWRITEV, R(pwritev)(fd, iov, iovcnt, offset), offset, iov, iovcnt);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int iovcnt, off64_t offset) {
    WRITE_BODY(C_PWRITEV64, R(pwritev64)(fd, iov, iovcnt, offset), offset, iov, iovcnt);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
    WRITE_BODY(C_PWRITEV2, R(pwritev2)(fd, iov, iovcnt, offset, flags), V2_AT, iov, iovcnt);
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int iovcnt, off64_t offset, int flags) {
    WRITE_BODY(C_PWRITEV64V2, R(pwritev64v2)(fd, iov, iovcnt, offset, flags), V2_AT, iov, iovcnt);
}

/* ---- sizes ---- */

static void record_size(uint8_t call, uint64_t t0, uint64_t ino, int64_t size) {
    int saved = errno;
    record(K_SIZE, call, 0, t0, now(), ino, size, 0, NULL, NULL, NULL, 0);
    errno = saved;
}

#define FTRUNCATE_BODY(callid, realcall)                                          \
    uint64_t ino;                                                                 \
    if (!watched_fd(fd, &ino, NULL, NULL)) return realcall;                       \
    uint64_t t0 = now();                                                          \
    int r = realcall;                                                             \
    if (r == 0) record_size(callid, t0, ino, length);                             \
    return r

int ftruncate(int fd, off_t length) {
    FTRUNCATE_BODY(C_FTRUNCATE, R(ftruncate)(fd, length));
}

int ftruncate64(int fd, off64_t length) {
    FTRUNCATE_BODY(C_FTRUNCATE64, R(ftruncate64)(fd, length));
}

static int truncate_path(uint8_t call, const char *path, off64_t length, int (*real)(const char *, off64_t)) {
    char abs[PATH_MAX];
    if (!active() || !absolute(AT_FDCWD, path, abs, sizeof abs) || !watched_path(abs)) return real(path, length);
    uint64_t t0 = now();
    int r = real(path, length);
    struct stat st;
    int saved = errno;
    if (r == 0 && stat(abs, &st) == 0) record_size(call, t0, (uint64_t)st.st_ino, length);
    errno = saved;
    return r;
}

static int truncate_off(const char *path, off64_t length) { return R(truncate)(path, (off_t)length); }
static int truncate64_off(const char *path, off64_t length) { return R(truncate64)(path, length); }

int truncate(const char *path, off_t length) {
    return truncate_path(C_TRUNCATE, path, length, truncate_off);
}

int truncate64(const char *path, off64_t length) {
    return truncate_path(C_TRUNCATE64, path, length, truncate64_off);
}

/* fallocate and posix_fallocate: recorded only when they change the size (allocation alone
 * changes no byte a reader sees). */
#define ALLOCATE_BODY(callid, realcall)                                           \
    uint64_t ino;                                                                 \
    if (!watched_fd(fd, &ino, NULL, NULL)) return realcall;                       \
    struct stat before, after;                                                    \
    int had = fstat(fd, &before) == 0;                                            \
    uint64_t t0 = now();                                                          \
    int r = realcall;                                                             \
    int saved = errno;                                                            \
    if (r == 0 && had && fstat(fd, &after) == 0 && after.st_size != before.st_size) \
        record_size(callid, t0, ino, after.st_size);                              \
    errno = saved;                                                                \
    return r

int fallocate(int fd, int mode, off_t offset, off_t len) {
    ALLOCATE_BODY(C_FALLOCATE, R(fallocate)(fd, mode, offset, len));
}

int fallocate64(int fd, int mode, off64_t offset, off64_t len) {
    ALLOCATE_BODY(C_FALLOCATE64, R(fallocate64)(fd, mode, offset, len));
}

int posix_fallocate(int fd, off_t offset, off_t len) {
    ALLOCATE_BODY(C_POSIX_FALLOCATE, R(posix_fallocate)(fd, offset, len));
}

int posix_fallocate64(int fd, off64_t offset, off64_t len) {
    ALLOCATE_BODY(C_POSIX_FALLOCATE64, R(posix_fallocate64)(fd, offset, len));
}

/* ---- names ---- */

static int renamed(uint8_t call, int olddirfd, const char *oldpath, int newdirfd, const char *newpath, uint64_t t0,
                   int r) {
    int saved = errno;
    char from[PATH_MAX], to[PATH_MAX];
    if (r == 0 && absolute(olddirfd, oldpath, from, sizeof from) && absolute(newdirfd, newpath, to, sizeof to) &&
        (watched_path(from) || watched_path(to)))
        record(K_RENAME, call, 0, t0, now(), 0, 0, 0, from, to, NULL, 0);
    errno = saved;
    return r;
}

int rename(const char *oldpath, const char *newpath) {
    if (!active()) return R(rename)(oldpath, newpath);
    uint64_t t0 = now();
    return renamed(C_RENAME, AT_FDCWD, oldpath, AT_FDCWD, newpath, t0, R(rename)(oldpath, newpath));
}

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
    if (!active()) return R(renameat)(olddirfd, oldpath, newdirfd, newpath);
    uint64_t t0 = now();
    return renamed(C_RENAMEAT, olddirfd, oldpath, newdirfd, newpath, t0,
                   R(renameat)(olddirfd, oldpath, newdirfd, newpath));
}

/* renameat2's flags are kept in `a`: RENAME_NOREPLACE renames like rename when it succeeds,
 * RENAME_EXCHANGE swaps two names (the test refuses what it does not model). */
int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    if (!active()) return R(renameat2)(olddirfd, oldpath, newdirfd, newpath, flags);
    uint64_t t0 = now();
    int r = R(renameat2)(olddirfd, oldpath, newdirfd, newpath, flags);
    int saved = errno;
    char from[PATH_MAX], to[PATH_MAX];
    if (r == 0 && absolute(olddirfd, oldpath, from, sizeof from) && absolute(newdirfd, newpath, to, sizeof to) &&
        (watched_path(from) || watched_path(to)))
        record(K_RENAME, C_RENAMEAT2, 0, t0, now(), 0, (int64_t)flags, 0, from, to, NULL, 0);
    errno = saved;
    return r;
}

static int unlinked(uint8_t call, int dirfd, const char *path, uint64_t t0, int r) {
    int saved = errno;
    char abs[PATH_MAX];
    if (r == 0 && absolute(dirfd, path, abs, sizeof abs) && watched_path(abs))
        record(K_UNLINK, call, 0, t0, now(), 0, 0, 0, abs, NULL, NULL, 0);
    errno = saved;
    return r;
}

int unlink(const char *path) {
    if (!active()) return R(unlink)(path);
    uint64_t t0 = now();
    return unlinked(C_UNLINK, AT_FDCWD, path, t0, R(unlink)(path));
}

/* unlinkat with AT_REMOVEDIR removes a directory: recorded the same way; the test refuses it. */
int unlinkat(int dirfd, const char *path, int flags) {
    if (!active()) return R(unlinkat)(dirfd, path, flags);
    uint64_t t0 = now();
    return unlinked(C_UNLINKAT, dirfd, path, t0, R(unlinkat)(dirfd, path, flags));
}

int remove(const char *path) {
    if (!active()) return R(remove)(path);
    uint64_t t0 = now();
    return unlinked(C_REMOVE, AT_FDCWD, path, t0, R(remove)(path));
}

/* ---- durability ---- */

/* A sync is recorded with the moment the real call returned, and only if it succeeded. */
static int synced(uint8_t call, uint64_t ino, int is_dir, uint64_t t0, int r, int64_t a, int64_t b) {
    int saved = errno;
    if (r == 0) record(K_SYNC, call, is_dir ? F_DIRECTORY : 0, t0, now(), ino, a, b, NULL, NULL, NULL, 0);
    errno = saved;
    return r;
}

#define SYNC_BODY(callid, realcall)                                               \
    uint64_t ino;                                                                 \
    int is_dir;                                                                   \
    if (!watched_fd(fd, &ino, &is_dir, NULL)) return realcall;                    \
    uint64_t t0 = now();                                                          \
    return synced(callid, ino, is_dir, t0, realcall, 0, 0)

int fsync(int fd) {
    SYNC_BODY(C_FSYNC, R(fsync)(fd));
}

int fdatasync(int fd) {
    SYNC_BODY(C_FDATASYNC, R(fdatasync)(fd));
}

/* syncfs of any descriptor on the directory's file system flushes it all; recorded with the
 * inode 0 when the descriptor is not a watched file (the test checks the device itself). */
int syncfs(int fd) {
    if (!active()) return R(syncfs)(fd);
    uint64_t ino = 0;
    int is_dir = 0;
    struct stat st, d;
    int same = fstat(fd, &st) == 0 && stat(dir, &d) == 0 && st.st_dev == d.st_dev;
    if (!same) return R(syncfs)(fd);
    watched_fd(fd, &ino, &is_dir, NULL);
    uint64_t t0 = now();
    return synced(C_SYNCFS, ino, is_dir, t0, R(syncfs)(fd), 0, 0);
}

void sync(void) {
    if (!active()) {
        R(sync)();
        return;
    }
    uint64_t t0 = now();
    R(sync)();
    synced(C_SYNC, 0, 0, t0, 0, 0, 0);
}

/* Logged, but no barrier: sync_file_range writes pages back without flushing the disk's cache
 * or any metadata. */
int sync_file_range(int fd, off64_t offset, off64_t nbytes, unsigned int flags) {
    uint64_t ino;
    if (!watched_fd(fd, &ino, NULL, NULL)) return R(sync_file_range)(fd, offset, nbytes, flags);
    uint64_t t0 = now();
    return synced(C_SYNC_FILE_RANGE, ino, 0, t0, R(sync_file_range)(fd, offset, nbytes, flags), offset, nbytes);
}

/* msync has no descriptor; recorded with the address and length, and no barrier either: the
 * only shared writable mappings of watched files are SQLite's -shm wal-index files (the test
 * checks /proc/<pid>/maps), which it treats as lost at a power cut whatever msync did. */
int msync(void *addr, size_t length, int flags) {
    if (!active()) return R(msync)(addr, length, flags);
    uint64_t t0 = now();
    return synced(C_MSYNC, 0, 0, t0, R(msync)(addr, length, flags), (int64_t)(uintptr_t)addr, (int64_t)length);
}

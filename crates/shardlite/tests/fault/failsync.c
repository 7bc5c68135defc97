/* An LD_PRELOAD shim for the I/O-error test (tests/io_error.rs): while the file named by
 * SHARDLITE_FAULT_TRIGGER exists, fsync and fdatasync of any file whose path contains
 * SHARDLITE_FAULT_PATTERN fail with EIO, as a dying disk's would. Everything else passes
 * through to libc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int should_fail(int fd) {
    const char *pattern = getenv("SHARDLITE_FAULT_PATTERN");
    const char *trigger = getenv("SHARDLITE_FAULT_TRIGGER");
    if (!pattern || !trigger || access(trigger, F_OK) != 0) return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0) return 0;
    path[n] = 0;
    return strstr(path, pattern) != NULL;
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (should_fail(fd)) { errno = EIO; return -1; }
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    if (should_fail(fd)) { errno = EIO; return -1; }
    return real(fd);
}

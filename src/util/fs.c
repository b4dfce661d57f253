/*
 * fs.c - files: creating the directories on the way to a path, reading a
 * whole file under a size cap, and saving a file durably and atomically.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

qkv_status qkv_mkdirs(const char *dir, qkv_error *err)
{
    return qkv_mkdirs_noted(dir, NULL, NULL, err);
}

qkv_status qkv_mkdirs_noted(const char *dir, qkv_made_fn made, void *ctx, qkv_error *err)
{
    char p[4096];
    size_t n = strlen(dir);
    if (n == 0)
        return QKV_OK;
    if (n >= sizeof p)
        return qkv_error_set(err, QKV_ERR_IO, "%s: path too long", dir);
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        struct stat sb;
        if (stat(p, &sb) != 0) {
            if (mkdir(p, 0777) == 0) {
                if (made != NULL)
                    made(ctx, p);
            } else if (errno != EEXIST) { /* EEXIST: another process made it first */
                return qkv_error_set(err, QKV_ERR_IO, "cannot create directory %s: %s", p,
                                     strerror(errno));
            }
        } else if (!S_ISDIR(sb.st_mode)) {
            return qkv_error_set(err, QKV_ERR_IO, "%s exists and is not a directory", p);
        }
        p[i] = c;
    }
    return QKV_OK;
}

/* Copies the directory part of path (before its last '/') into dir (cap
 * bytes), and sets *base to the name after it; *base is NULL when path has no '/'. */
static qkv_status parent_dir(const char *path, char *dir, size_t cap, const char **base,
                             qkv_error *err)
{
    const char *slash = strrchr(path, '/');
    *base = NULL;
    if (slash == NULL)
        return QKV_OK;
    if ((size_t)(slash - path) >= cap)
        return qkv_error_set(err, QKV_ERR_IO, "%s: path too long", path);
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
    *base = slash + 1;
    return QKV_OK;
}

qkv_status qkv_mkdirs_for(const char *path, qkv_error *err)
{
    return qkv_mkdirs_for_noted(path, NULL, NULL, err);
}

qkv_status qkv_mkdirs_for_noted(const char *path, qkv_made_fn made, void *ctx, qkv_error *err)
{
    char dir[4096];
    const char *base;
    qkv_status s = parent_dir(path, dir, sizeof dir, &base, err);
    if (s != QKV_OK || base == NULL)
        return s;
    return qkv_mkdirs_noted(dir, made, ctx, err);
}

/* The longest name a directory entry in dir may have. */
static size_t name_max(const char *dir)
{
    errno = 0;
    const long n = pathconf(dir, _PC_NAME_MAX);
    return n > 0 ? (size_t)n : 255; /* no limit given: NAME_MAX on Linux */
}

/* qkv_mkdirs_check's body; when a directory is missing, *max is the
 * longest name it and those below it may have. */
static qkv_status check_dirs(const char *dir, int *missing, size_t *max, qkv_error *err)
{
    char p[4096];
    size_t n = strlen(dir);
    *missing = 0;
    if (n == 0)
        return QKV_OK;
    if (n >= sizeof p)
        return qkv_error_set(err, QKV_ERR_IO, "%s: path too long", dir);
    memcpy(p, dir, n + 1);
    size_t last = p[0] == '/'; /* where the name being looked at starts */
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        struct stat sb;
        if (!*missing && stat(p, &sb) == 0) {
            if (!S_ISDIR(sb.st_mode))
                return qkv_error_set(err, QKV_ERR_IO, "%s exists and is not a directory", p);
        } else if (!*missing && errno != ENOENT) {
            return qkv_error_set(err, QKV_ERR_IO, "cannot create directory %s: %s", p,
                                 strerror(errno));
        } else if (!*missing) {
            /* the first to make: its parent must take a new entry */
            char parent[4096];
            snprintf(parent, sizeof parent, "%.*s", last == 0 ? 1 : (int)last, last == 0 ? "." : p);
            if (access(parent, W_OK | X_OK) != 0)
                return qkv_error_set(err, QKV_ERR_IO, "cannot create directory %s: %s", p,
                                     strerror(errno));
            *missing = 1;
            *max = name_max(parent); /* and below it, on the same file system */
            if (strlen(p + last) > *max)
                return qkv_error_set(err, QKV_ERR_IO, "cannot create directory %s: %s", p,
                                     strerror(ENAMETOOLONG));
        } else if (strlen(p + last) > *max) {
            return qkv_error_set(err, QKV_ERR_IO, "cannot create directory %s: %s", p,
                                 strerror(ENAMETOOLONG));
        }
        p[i] = c;
        last = i + 1;
    }
    return QKV_OK;
}

qkv_status qkv_mkdirs_check(const char *dir, int *missing, qkv_error *err)
{
    size_t max;
    return check_dirs(dir, missing, &max, err);
}

qkv_status qkv_mkdirs_for_check(const char *path, int *missing, qkv_error *err)
{
    char dir[4096];
    const char *base;
    *missing = 0;
    qkv_status s = parent_dir(path, dir, sizeof dir, &base, err);
    if (s != QKV_OK || base == NULL)
        return s;
    size_t max = 0;
    s = check_dirs(dir, missing, &max, err);
    if (s == QKV_OK && *missing && strlen(base) > max)
        s = qkv_error_set(err, QKV_ERR_IO, "cannot write %s: %s", path, strerror(ENAMETOOLONG));
    return s;
}

unsigned char *qkv_read_file(const char *path, size_t max, size_t *len, qkv_error *err)
{
    struct stat sb;
    /* O_NONBLOCK: opening a named pipe with no writer returns at once (and
     * is then refused as not a regular file) instead of waiting for ever;
     * reading a regular file ignores it */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        qkv_error_set(err, QKV_ERR_IO, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    unsigned char *p = NULL;
    size_t cap = 0, got = 0;
    if (fstat(fd, &sb) != 0)
        qkv_error_set(err, QKV_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    else if (S_ISDIR(sb.st_mode))
        qkv_error_set(err, QKV_ERR_IO, "%s is a directory, not a file", path);
    else if (!S_ISREG(sb.st_mode))
        qkv_error_set(err, QKV_ERR_IO, "%s is not a regular file", path);
    else if ((uintmax_t)sb.st_size > max)
        qkv_error_set(err, QKV_ERR_FORMAT, "%s is too large: %jd bytes, at most %zu", path,
                      (intmax_t)sb.st_size, max);
    else {
        /* st_size is where the reading starts, not where it ends: a /proc
         * file says 0 and a /sys file 4096 whatever they hold, so the
         * file is read to its end */
        cap = sb.st_size > 0 ? (size_t)sb.st_size : max < 4096 ? max : 4096;
        if ((p = qkv_malloc(cap > 0 ? cap : 1)) == NULL)
            qkv_error_set(err, QKV_ERR_NOMEM, "%s: out of memory for %zu bytes", path, cap);
    }
    while (p != NULL) {
        unsigned char more;
        /* a full buffer reads one byte aside: at the end, nothing is
         * grown, and a file of max bytes needs no room for max + 1 */
        ssize_t r = got < cap ? read(fd, p + got, cap - got) : read(fd, &more, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            qkv_error_set(err, QKV_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        } else if (r == 0) {
            if (got > 0)
                break;
            qkv_error_set(err, QKV_ERR_FORMAT, "%s is empty", path);
        } else if (got < cap) {
            got += (size_t)r;
            continue;
        } else if (cap >= max) {
            qkv_error_set(err, QKV_ERR_FORMAT, "%s is too large: more than %zu bytes", path, max);
        } else {
            const size_t grown = cap <= max / 2 ? 2 * cap : max;
            unsigned char *q = qkv_realloc(p, grown);
            if (q != NULL) {
                p = q;
                cap = grown;
                p[got++] = more;
                continue;
            }
            qkv_error_set(err, QKV_ERR_NOMEM, "%s: out of memory for %zu bytes", path, grown);
        }
        free(p);
        p = NULL;
    }
    close(fd);
    if (p != NULL)
        *len = got;
    return p;
}

/* The directory part of path ("." for a bare name) into dir. */
static int dir_of(const char *path, char *dir, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return snprintf(dir, size, ".") < (int)size;
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= size)
        return 0;
    memcpy(dir, path, n);
    dir[n] = '\0';
    return 1;
}

/* Makes the rename durable: fsync of the directory that holds it. */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = fsync(fd);
    if (r != 0 && (errno == EINVAL || errno == EROFS))
        r = 0; /* a file system that cannot sync directories */
    close(fd);
    return r;
}

qkv_status qkv_check_replaceable(const char *path, qkv_error *err)
{
    struct stat sb;
    if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return qkv_error_set(err, QKV_ERR_IO,
                             "%s exists and is not a regular file (%s); refusing to replace it",
                             path,
                             S_ISLNK(sb.st_mode)   ? "a symbolic link"
                             : S_ISDIR(sb.st_mode) ? "a directory"
                                                   : "a device or other special file");
    return QKV_OK;
}

/* Creates the file tmp, whose name ends in XXXXXX, as mkstemp does (those
 * six letters made unique, O_EXCL: nothing planted there is followed), but
 * with mode 0666 less the umask, as fopen gives a new file; mkstemp's are
 * 0600 whatever the umask. The descriptor, or -1 with errno set. */
static int create_unique(char *tmp)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    char *x = tmp + strlen(tmp) - 6;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* the time, the process and this thread's stack: another saver in the
     * same directory draws other names */
    uint64_t seed = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 40 ^
                    (uint64_t)(uintptr_t)&ts;
    for (int attempt = 0; attempt < 1000; attempt++) {
        uint64_t r = (seed + (uint64_t)attempt) * 0x9E3779B97F4A7C15u;
        for (int i = 0; i < 6; i++, r /= 62)
            x[i] = abc[r % 62];
        int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1; /* errno is EEXIST */
}

/* After qkv_check_replaceable(path): path's directory into dir and the
 * template of a temporary file beside it, DIR/.BASE.XXXXXX, into tmp. */
static qkv_status temp_beside(const char *path, char (*dir)[4096], char (*tmp)[4200],
                              qkv_error *err)
{
    qkv_status s = qkv_check_replaceable(path, err);
    if (s != QKV_OK)
        return s;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (!dir_of(path, *dir, sizeof *dir) || *base == '\0' ||
        snprintf(*tmp, sizeof *tmp, "%s/.%s.XXXXXX", *dir, base) >= (int)sizeof *tmp)
        return qkv_error_set(err, QKV_ERR_IO, "%s: not a usable file name", path);
    return QKV_OK;
}

qkv_status qkv_check_writable(const char *path, qkv_error *err)
{
    char dir[4096], tmp[4200];
    qkv_status s = temp_beside(path, &dir, &tmp, err);
    if (s != QKV_OK)
        return s;
    /* a directory still to make takes the file if it can be made and
     * the temporary file's name fits in it; nothing is made now */
    int missing;
    if ((s = qkv_mkdirs_for_check(path, &missing, err)) != QKV_OK)
        return s;
    if (missing) {
        qkv_error ignored = qkv_error_none();
        if (qkv_mkdirs_for_check(tmp, &missing, &ignored) != QKV_OK)
            return qkv_error_set(err, QKV_ERR_IO, "cannot write %s: cannot create a file in %s: %s",
                                 path, dir, strerror(ENAMETOOLONG));
        return QKV_OK;
    }
    int fd = create_unique(tmp); /* as qkv_save_atomic's, then gone */
    if (fd < 0)
        return qkv_error_set(err, QKV_ERR_IO, "cannot write %s: cannot create a file in %s: %s",
                             path, dir, strerror(errno));
    close(fd);
    unlink(tmp);
    return QKV_OK;
}

/* qkv_temp_beside's body, with path's directory into dir as well. */
static qkv_status open_beside(const char *path, char (*dir)[4096], char (*tmp)[4200], FILE **f,
                              qkv_error *err)
{
    *f = NULL;
    if (path == NULL || *path == '\0')
        return qkv_error_set(err, QKV_ERR_IO, "no file name to save to");
    qkv_status s = temp_beside(path, dir, tmp, err);
    if (s != QKV_OK)
        return s;
    /* a new, unique file that nobody else can have planted: O_EXCL */
    int fd = create_unique(*tmp);
    if (fd < 0)
        return qkv_error_set(err, QKV_ERR_IO, "cannot write %s: cannot create a file in %s: %s",
                             path, *dir, strerror(errno));
    if ((*f = fdopen(fd, "wb")) == NULL) {
        s = qkv_error_set(err, QKV_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        close(fd);
        unlink(*tmp);
    }
    return s;
}

FILE *qkv_temp_beside(const char *path, char (*tmp)[4200], qkv_error *err)
{
    char dir[4096];
    FILE *f;
    open_beside(path, &dir, tmp, &f, err);
    return f;
}

qkv_status qkv_save_atomic(const char *path, qkv_write_fn write, void *ctx, qkv_error *err)
{
    char dir[4096], tmp[4200];
    FILE *f;
    qkv_status s = open_beside(path, &dir, &tmp, &f, err);
    if (s != QKV_OK)
        return s;
    s = write(ctx, f, err);
    if (s == QKV_OK && (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0))
        s = qkv_error_set(err, QKV_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (fclose(f) != 0 && s == QKV_OK)
        s = qkv_error_set(err, QKV_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (s == QKV_OK && rename(tmp, path) != 0)
        s = qkv_error_set(err, QKV_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (s != QKV_OK) {
        unlink(tmp);
        return s;
    }
    if (sync_dir(dir) != 0)
        return qkv_error_set(err, QKV_ERR_IO, "wrote %s, but cannot sync %s: %s", path, dir,
                             strerror(errno));
    return QKV_OK;
}

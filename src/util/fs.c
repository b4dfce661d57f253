/*
 * fs.c - files: creating the directories on the way to a path.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "util/util.h"

qkv_status qkv_mkdirs(const char *dir, qkv_error *err)
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
            if (mkdir(p, 0777) != 0 && errno != EEXIST)
                return qkv_error_set(err, QKV_ERR_IO, "cannot create directory %s: %s", p,
                                     strerror(errno));
        } else if (!S_ISDIR(sb.st_mode)) {
            return qkv_error_set(err, QKV_ERR_IO, "%s exists and is not a directory", p);
        }
        p[i] = c;
    }
    return QKV_OK;
}

qkv_status qkv_mkdirs_for(const char *path, qkv_error *err)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return QKV_OK;
    if ((size_t)(slash - path) >= sizeof dir)
        return qkv_error_set(err, QKV_ERR_IO, "%s: path too long", path);
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
    return qkv_mkdirs(dir, err);
}

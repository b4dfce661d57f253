/*
 * error.c - status names, error records, the ABI check, and numbers and
 * shapes for messages.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "util/util.h"

const char *qkv_status_string(qkv_status s)
{
    switch (s) {
    case QKV_OK: return "ok";
    case QKV_ERR_SHAPE: return "shape mismatch";
    case QKV_ERR_ARG: return "invalid argument";
    case QKV_ERR_NOMEM: return "out of memory";
    case QKV_ERR_IO: return "input/output error";
    case QKV_ERR_FORMAT: return "malformed input";
    case QKV_ERR_NUMERIC: return "non-finite number";
    case QKV_ERR_ABI: return "header and library mismatch";
    }
    return "unknown status";
}

qkv_error qkv_error_none(void)
{
    qkv_error e;
    e.status = QKV_OK;
    e.message[0] = '\0';
    return e;
}

qkv_status qkv_verror(qkv_error *e, qkv_status s, const char *fmt, va_list ap)
{
    /* room for a message with a path of the longest the CLI takes: what
     * does not fit in e->message loses its middle, not its end */
    char raw[4608], work[4 * sizeof raw];
    if (e == NULL || s == QKV_OK)
        return s;
    e->status = s;
    vsnprintf(raw, sizeof raw, fmt, ap);
    /* one line, no escape sequences */
    qkv_escape_elided(e->message, sizeof e->message, raw, work, sizeof work);
    return s;
}

qkv_status qkv_error_set(qkv_error *e, qkv_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    qkv_verror(e, s, fmt, ap);
    va_end(ap);
    return s;
}

static const char *scalar_name(unsigned abi)
{
    switch (abi & 0xffu) {
    case 4: return "float32";
    case 8: return "double";
    }
    return "an unknown scalar type";
}

int qkv_abi_ok(unsigned abi, qkv_error *e)
{
    static atomic_flag told = ATOMIC_FLAG_INIT;
    if (abi == QKV_ABI)
        return 1;
    qkv_error local = qkv_error_none();
    if ((abi & 0xffu) != (QKV_ABI & 0xffu))
        qkv_error_set(&local, QKV_ERR_ABI,
                      "this program was compiled for %s qkv but is linked to the %s build of "
                      "libqkv; compile it with the library's flags: $(pkg-config --cflags qkv)%s",
                      scalar_name(abi), scalar_name(QKV_ABI),
                      QKV_ABI == 8u + (QKV_ABI_VERSION << 8) ? " (-DQKV_DOUBLE)" : "");
    else
        qkv_error_set(&local, QKV_ERR_ABI,
                      "this program was compiled against qkv headers of interface version %u, "
                      "but libqkv %s has version %u; rebuild it against the installed headers",
                      abi >> 8, QKV_VERSION, (unsigned)QKV_ABI_VERSION);
    if (e != NULL)
        *e = local;
    else if (!atomic_flag_test_and_set(
                 &told)) /* a caller that collects no errors still learns why */
        fprintf(stderr, "qkv: %s\n", local.message);
    return 0;
}

const char *qkv_num_str(char *buf, size_t len, double x)
{
    if (len == 0)
        return buf;
    if (isnan(x))
        snprintf(buf, len, "NaN");
    else if (isinf(x))
        snprintf(buf, len, x > 0 ? "infinity" : "-infinity");
    else
        snprintf(buf, len, "%g", x);
    return buf;
}

void qkv_dims_str(int n, const int *dims, char *buf, size_t len)
{
    if (len == 0)
        return;
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, i ? ",%d" : "%d", dims[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

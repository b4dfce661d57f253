/*
 * dispatch.c - which kernel set runs: chosen once, from the CPU (cpuid) and
 * the environment variable QKV_KERNELS, or set by qkv_kernels_use.
 *
 * The choice is an atomic pointer. The first reader that finds it unset
 * makes the default choice under pthread_once, so worker threads that
 * reach a kernel first cannot race the main thread over it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "qkv/runtime.h"
#include "util/util.h"

#ifdef QKV_HAVE_X86_KERNELS
static int cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int cpu_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}
#endif

/* The fastest kernel set this CPU supports. */
static const qkv_kernel_set *cpu_best(void)
{
#ifdef QKV_HAVE_X86_KERNELS
    if (cpu_has_avx512())
        return &qkv_kernels_avx512;
    if (cpu_has_avx2())
        return &qkv_kernels_avx2;
#endif
    return &qkv_kernels_portable;
}

/* The kernel set called name, if this build and CPU have it; else NULL. */
static const qkv_kernel_set *find_set(const char *name)
{
    if (name == NULL)
        return NULL;
    if (strcmp(name, "auto") == 0)
        return cpu_best();
    if (strcmp(name, "portable") == 0)
        return &qkv_kernels_portable;
#ifdef QKV_HAVE_X86_KERNELS
    if (strcmp(name, "avx2") == 0 && cpu_has_avx2())
        return &qkv_kernels_avx2;
    if (strcmp(name, "avx512") == 0 && cpu_has_avx512())
        return &qkv_kernels_avx512;
#endif
    return NULL;
}

static _Atomic(const qkv_kernel_set *) active;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

/* The default: QKV_KERNELS from the environment if it names a kernel set
 * this machine has, else the fastest; unless qkv_kernels_use got there
 * first. */
static void choose_default(void)
{
    const qkv_kernel_set *env = find_set(getenv("QKV_KERNELS"));
    const qkv_kernel_set *unset = NULL;
    atomic_compare_exchange_strong(&active, &unset, env != NULL ? env : cpu_best());
}

const qkv_kernel_set *qkv_kernels(void)
{
    const qkv_kernel_set *k = atomic_load_explicit(&active, memory_order_acquire);
    if (k != NULL)
        return k;
    pthread_once(&default_once, choose_default);
    return atomic_load_explicit(&active, memory_order_acquire);
}

qkv_status qkv_kernels_use(const char *name, qkv_error *err)
{
    const qkv_kernel_set *pick = find_set(name);
    if (pick == NULL)
        return qkv_error_set(err, QKV_ERR_ARG,
                             "kernels: '%s' is not a kernel set this build and CPU have (auto, "
                             "portable%s)",
                             name ? name : "(null)",
#ifdef QKV_HAVE_X86_KERNELS
                             cpu_has_avx512() ? ", avx2, avx512"
                             : cpu_has_avx2() ? ", avx2"
                                              : ""
#else
                             ""
#endif
        );
    atomic_store_explicit(&active, pick, memory_order_release);
    return QKV_OK;
}

const char *qkv_kernels_name(void)
{
    return qkv_kernels()->name;
}

/*
 * runtime.h - the two things a user may set about how qkv runs: which
 * instruction set its kernels use, and how many threads share batched work.
 * Neither changes what is computed beyond float rounding (the kernel set)
 * or at all (the thread count).
 */
#ifndef QKV_RUNTIME_H
#define QKV_RUNTIME_H

#include "qkv/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Chooses the instruction set of the kernels: "auto" (the fastest this CPU
 * supports), "portable" (plain C and libm, always built), "avx2" (AVX2 and
 * FMA) or "avx512" (AVX-512F); the last two exist only in float32 builds on
 * x86-64. Without a call, the set is chosen once, on first use: the one the
 * environment variable QKV_KERNELS names if this machine has it, else
 * "auto". Results differ between sets only by float rounding. Returns
 * QKV_ERR_ARG (and changes nothing) for a set this build or CPU lacks.
 * Call it before starting threads that use qkv. */
qkv_status qkv_kernels_use(const char *name, qkv_error *err);

/* The name of the kernel set in use ("portable", "avx2" or "avx512"). */
const char *qkv_kernels_name(void);

/* Threads for batched work (the items of the attention ops): n from 1 to
 * 64. The default is the environment variable QKV_THREADS when it is such
 * an n in digits alone (no sign, no spaces), else 1. Work is
 * split only where each thread gets enough of it, so tiny steps stay on one
 * thread. Every result is the same, bit for bit, for any thread count: each
 * thread does whole, independent pieces, and pieces that add into one
 * place add in a fixed order. Returns QKV_ERR_ARG for an n out of range.
 *
 * Threads of a program's own may each use their own tapes, parameter
 * lists and optimizers at the same time, with the same results as one
 * after the other: the pool runs one caller's batched work at a time,
 * and a call that finds it busy runs on its own thread alone. A tape, a
 * list or an optimizer is for one thread at a time. A child process
 * forked after the threads started starts threads of its own when it
 * first needs them. */
qkv_status qkv_threads_use(int n, qkv_error *err);

/* The thread count in use. */
int qkv_threads(void);

/* Flushes subnormal numbers to zero (on != 0), as inputs and as results,
 * in the calling thread and in the workers that run its batched work; or
 * restores IEEE subnormals (on = 0, the default). PyTorch's
 * torch.set_flush_denormal. A subnormal float is below 1.2e-38; a
 * gradient that vanishes through many steps of a recurrence reaches that
 * range, and on x86 every operation on one can take a hundred times
 * longer (measured: an RNN step of T = 256 took 6.9 ms, against 1.3 ms
 * flushed). Results change only where a value is that small. Returns 1,
 * or 0 where there is no such mode (then nothing changes): on x86 only,
 * and not under an emulator that ignores it, as valgrind does. */
int qkv_flush_denormals(int on);

#ifdef __cplusplus
}
#endif
#endif

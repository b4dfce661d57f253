/*
 * rng.h - a random number generator that matches CPython's `random` module.
 *
 * MT19937, seeded as random.seed(n) seeds it for a non-negative integer n
 * (init_by_array over the 32-bit words of n). random(), normalvariate(),
 * getrandbits(k<=64), and the helpers below return exactly what CPython 3
 * returns for the same seed and the same sequence of calls. This is what
 * lets `qkv demo` reproduce the tutorial's Python numbers.
 *
 * Every function accepts a NULL generator and then draws nothing:
 * qkv_rng_seed and qkv_rng_shuffle do nothing, and the others return 0.
 */
#ifndef QKV_RNG_H
#define QKV_RNG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QKV_MT_N 624

typedef struct qkv_rng {
    uint32_t mt[QKV_MT_N]; /* (624) generator state */
    int mti;               /* next index into mt; QKV_MT_N means regenerate */
} qkv_rng;

/* Seeds like CPython's random.seed(seed). */
void qkv_rng_seed(qkv_rng *r, uint64_t seed);

/* The next raw 32-bit output of MT19937. */
uint32_t qkv_rng_u32(qkv_rng *r);

/* random.random(): a double in [0, 1) with 53 random bits. */
double qkv_rng_random(qkv_rng *r);

/* random.normalvariate(mu, sigma) (Kinderman-Monahan ratio method). */
double qkv_rng_normalvariate(qkv_rng *r, double mu, double sigma);

/* random.getrandbits(k) for 1 <= k <= 64; returns 0 for other k. */
uint64_t qkv_rng_getrandbits(qkv_rng *r, int k);

/* random._randbelow(n) for any n >= 1: uniform in [0, n), by rejection on
 * getrandbits(bit_length(n)). Returns 0 for n = 0. */
uint64_t qkv_rng_below(qkv_rng *r, uint64_t n);

/* random.shuffle(x) for an array of n items of `size` bytes each (any
 * size). */
void qkv_rng_shuffle(qkv_rng *r, void *base, size_t n, size_t size);

/* random.choice(range(n)): an index in [0, n). */
size_t qkv_rng_choice(qkv_rng *r, size_t n);

#ifdef __cplusplus
}
#endif
#endif

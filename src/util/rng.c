/*
 * rng.c - MT19937 as CPython's random module drives it.
 *
 * The generator is Matsumoto and Nishimura's; seeding, the 53-bit doubles,
 * getrandbits, _randbelow and normalvariate follow the algorithms of
 * CPython's Modules/_randommodule.c and Lib/random.py, so the same seed
 * gives the same numbers.
 */
#include <math.h>
#include <string.h>

#include "qkv/rng.h"

#define MT_M 397
#define MATRIX_A 0x9908b0dfu
#define UPPER_MASK 0x80000000u
#define LOWER_MASK 0x7fffffffu

static void init_genrand(qkv_rng *r, uint32_t s)
{
    r->mt[0] = s;
    for (int i = 1; i < QKV_MT_N; i++)
        r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->mti = QKV_MT_N;
}

static void init_by_array(qkv_rng *r, const uint32_t *key, int len)
{
    int i = 1, j = 0;
    init_genrand(r, 19650218u);
    for (int k = QKV_MT_N > len ? QKV_MT_N : len; k; k--) {
        r->mt[i] =
            (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++;
        j++;
        if (i >= QKV_MT_N) {
            r->mt[0] = r->mt[QKV_MT_N - 1];
            i = 1;
        }
        if (j >= len)
            j = 0;
    }
    for (int k = QKV_MT_N - 1; k; k--) {
        r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= QKV_MT_N) {
            r->mt[0] = r->mt[QKV_MT_N - 1];
            i = 1;
        }
    }
    r->mt[0] = 0x80000000u; /* non-zero initial state */
}

void qkv_rng_seed(qkv_rng *r, uint64_t seed)
{
    /* CPython splits |n| into 32-bit words, least significant first, and
     * keeps at least one word (so 0 seeds with the key [0]). */
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    if (r == NULL)
        return;
    init_by_array(r, key, key[1] ? 2 : 1);
}

uint32_t qkv_rng_u32(qkv_rng *r)
{
    static const uint32_t mag01[2] = {0u, MATRIX_A};
    uint32_t y;
    if (r == NULL)
        return 0;
    if (r->mti >= QKV_MT_N) {
        int kk;
        for (kk = 0; kk < QKV_MT_N - MT_M; kk++) {
            y = (r->mt[kk] & UPPER_MASK) | (r->mt[kk + 1] & LOWER_MASK);
            r->mt[kk] = r->mt[kk + MT_M] ^ (y >> 1) ^ mag01[y & 1u];
        }
        for (; kk < QKV_MT_N - 1; kk++) {
            y = (r->mt[kk] & UPPER_MASK) | (r->mt[kk + 1] & LOWER_MASK);
            r->mt[kk] = r->mt[kk + (MT_M - QKV_MT_N)] ^ (y >> 1) ^ mag01[y & 1u];
        }
        y = (r->mt[QKV_MT_N - 1] & UPPER_MASK) | (r->mt[0] & LOWER_MASK);
        r->mt[QKV_MT_N - 1] = r->mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 1u];
        r->mti = 0;
    }
    y = r->mt[r->mti++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

double qkv_rng_random(qkv_rng *r)
{
    uint32_t a = qkv_rng_u32(r) >> 5, b = qkv_rng_u32(r) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

double qkv_rng_normalvariate(qkv_rng *r, double mu, double sigma)
{
    const double magic = 4 * exp(-0.5) / sqrt(2.0);
    double z;
    if (r == NULL) /* not mu: a NULL generator draws nothing, and gives 0 */
        return 0;
    for (;;) {
        double u1 = qkv_rng_random(r);
        double u2 = 1.0 - qkv_rng_random(r);
        z = magic * (u1 - 0.5) / u2;
        if (z * z / 4.0 <= -log(u2))
            break;
    }
    return mu + z * sigma;
}

uint64_t qkv_rng_getrandbits(qkv_rng *r, int k)
{
    if (k < 1 || k > 64) /* a NULL r: qkv_rng_u32 gives 0 words */
        return 0;
    if (k <= 32)
        return qkv_rng_u32(r) >> (32 - k);
    /* CPython fills 32-bit words from the least significant up, the last
     * one cut to the bits left */
    uint64_t lo = qkv_rng_u32(r);
    return lo | (uint64_t)(qkv_rng_u32(r) >> (64 - k)) << 32;
}

uint64_t qkv_rng_below(qkv_rng *r, uint64_t n)
{
    if (n == 0) /* a NULL r: getrandbits gives 0, which is below n */
        return 0;
    int k = 0;
    while (k < 64 && (n >> k) != 0)
        k++;
    uint64_t v;
    do
        v = qkv_rng_getrandbits(r, k);
    while (v >= n);
    return v;
}

/* Swaps the size bytes at a and b, 64 at a time. */
static void swap_bytes(unsigned char *a, unsigned char *b, size_t size)
{
    unsigned char tmp[64];
    for (size_t o = 0; o < size; o += sizeof tmp) {
        size_t k = size - o < sizeof tmp ? size - o : sizeof tmp;
        memcpy(tmp, a + o, k);
        memcpy(a + o, b + o, k);
        memcpy(b + o, tmp, k);
    }
}

void qkv_rng_shuffle(qkv_rng *r, void *base, size_t n, size_t size)
{
    unsigned char *p = base;
    if (r == NULL || p == NULL || size == 0 || n < 2)
        return;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = qkv_rng_below(r, (uint64_t)i + 1);
        if (j != i)
            swap_bytes(p + i * size, p + j * size, size);
    }
}

size_t qkv_rng_choice(qkv_rng *r, size_t n)
{
    return qkv_rng_below(r, n);
}

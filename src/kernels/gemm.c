/*
 * gemm.c - matrix products: the shared parts of every kernel set.
 *
 * qkv_gemm fixes the order of the additions from the shape (the chain,
 * blocks and dots orders of kernels.h); a set's gemm, where it has one
 * (AVX2, AVX-512), runs every order with register tiles. The portable set
 * has two paths. Products whose C is small or thin (the per-sentence
 * attention matmuls, 12×12 up to 16×512) take its direct path: each row of
 * C is held in registers while it accumulates. Larger ones use a
 * cache-blocked GEMM in the style of GotoBLAS/BLIS: B is packed into KC×NR
 * panels, A into MR×KC panels, and the micro-kernel computes each MR×NR
 * tile of C. Every path adds up the same products; only the order of the
 * float additions differs.
 */
#include <string.h>

#include "kernels/kernels.h"

#define KC QKV_GEMM_KC /* depth of a packed panel */
#define MC 96          /* rows of A packed at once: a multiple of every MR */
#define NC QKV_GEMM_NC /* columns of B packed at once: a multiple of every NR */
#define BLOCKED_MIN 48 /* both sides of C at least this: the blocked path */

/* ---- the direct path ---------------------------------------------------- */
/*
 * For products whose C is small or thin (the per-sentence attention
 * matmuls, 12×12 to 16×512). Each row of C is computed a register-wide
 * chunk at a time: the chunk is loaded once, accumulates A(i,p)·B[p,chunk]
 * over all p, and is stored once. A transposed B is first copied to scratch
 * 64 columns at a time, which costs k·n moves against m·n·k multiply-adds.
 */
_Thread_local _Alignas(64) qkv_real qkv_direct_scratch[QKV_DIRECT_SCRATCH];

/* C[i,j] += Σ_p A(i,p)·B[j,p] as dot products (B too deep to copy); with
 * store, C is zeroed first. */
void qkv_gemm_dots(int ta, int m, int n, int k, const qkv_real *A, const qkv_real *B, qkv_real *C,
                   int store)
{
    if (store)
        qkv_zero(C, (size_t)m * n);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            qkv_real s[4] = {0};
            int p = 0;
            for (; p + 4 <= k; p += 4)
                for (int l = 0; l < 4; l++)
                    s[l] += (ta ? A[(size_t)(p + l) * m + i] : A[(size_t)i * k + p + l]) *
                            B[(size_t)j * k + p + l];
            for (; p < k; p++)
                s[0] += (ta ? A[(size_t)p * m + i] : A[(size_t)i * k + p]) * B[(size_t)j * k + p];
            C[(size_t)i * n + j] += (s[0] + s[1]) + (s[2] + s[3]);
        }
}

int qkv_gemm_takes_dots(int n, int k)
{
    return (size_t)k * (size_t)(n < QKV_DIRECT_NR ? n : QKV_DIRECT_NR) > QKV_DIRECT_SCRATCH;
}

/* Columns [j0, j0 + w) of Bᵀ (B stored n×k) as a row-major k×w matrix,
 * in 16×16 blocks: a block's 16 source rows and 16 destination rows stay
 * in L1, where one source row at a time strided its stores across all k
 * destination rows (a 128×128 transpose took about 50 µs, 3 ns an entry,
 * with a row stride of 512 bytes landing every store in the same sets). */
void qkv_gemm_bt_cols(int k, int j0, int w, const qkv_real *B, qkv_real *dst)
{
    enum { BS = 16 };
    for (int jb = 0; jb < w; jb += BS) {
        const int je = w - jb < BS ? w : jb + BS;
        for (int pb = 0; pb < k; pb += BS) {
            const int pe = k - pb < BS ? k : pb + BS;
            for (int j = jb; j < je; j++)
                for (int p = pb; p < pe; p++)
                    dst[(size_t)p * w + j] = B[(size_t)(j0 + j) * k + p];
        }
    }
}

/* ---- the blocked path --------------------------------------------------- */

static _Thread_local _Alignas(64) qkv_real pack_a_buf[MC * KC];
_Thread_local _Alignas(64) qkv_real qkv_gemm_pack_b[KC * NC];

/* Adds the mr×nr corner of an MR×NR tile t (row stride NR) to C. */
void qkv_gemm_add_tile(const qkv_real *t, int NR, qkv_real *c, int ldc, int mr, int nr)
{
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            c[(size_t)i * ldc + j] += t[i * NR + j];
}

/* Packs rows [0,mc) × depth [0,kc) of op(A), element (i,p) at A[i·rs + p·cs],
 * into MR-row panels, depth-major, zero-padding the last panel. */
static void pack_a(int MR, int mc, int kc, const qkv_real *A, size_t rs, size_t cs, qkv_real *ap)
{
    for (int i0 = 0; i0 < mc; i0 += MR) {
        int mr = mc - i0 < MR ? mc - i0 : MR;
        for (int p = 0; p < kc; p++, ap += MR) {
            const qkv_real *src = A + (size_t)i0 * rs + (size_t)p * cs;
            int r = 0;
            for (; r < mr; r++)
                ap[r] = src[(size_t)r * rs];
            for (; r < MR; r++)
                ap[r] = 0;
        }
    }
}

/* Packs depth [0,kc) × columns [0,nc) of op(B), element (p,j) at
 * B[p·rs + j·cs], into NR-column panels, depth-major, zero-padded. */
static void pack_b(int NR, int kc, int nc, const qkv_real *B, size_t rs, size_t cs, qkv_real *bp)
{
    for (int j0 = 0; j0 < nc; j0 += NR) {
        int nr = nc - j0 < NR ? nc - j0 : NR;
        for (int p = 0; p < kc; p++, bp += NR) {
            const qkv_real *src = B + (size_t)p * rs + (size_t)j0 * cs;
            int c = 0;
            for (; c < nr; c++)
                bp[c] = src[(size_t)c * cs];
            for (; c < NR; c++)
                bp[c] = 0;
        }
    }
}

static void gemm_blocked(const qkv_kernel_set *im, int ta, int tb, int m, int n, int k,
                         const qkv_real *A, const qkv_real *B, qkv_real *C)
{
    const size_t ars = ta ? 1 : (size_t)k, acs = ta ? (size_t)m : 1;
    const size_t brs = tb ? 1 : (size_t)n, bcs = tb ? (size_t)k : 1;
    const int MR = im->mr, NR = im->nr;
    for (int jc = 0; jc < n; jc += NC) {
        int nc = n - jc < NC ? n - jc : NC;
        for (int pc = 0; pc < k; pc += KC) {
            int kc = k - pc < KC ? k - pc : KC;
            pack_b(NR, kc, nc, B + (size_t)pc * brs + (size_t)jc * bcs, brs, bcs, qkv_gemm_pack_b);
            for (int ic = 0; ic < m; ic += MC) {
                int mc = m - ic < MC ? m - ic : MC;
                pack_a(MR, mc, kc, A + (size_t)ic * ars + (size_t)pc * acs, ars, acs, pack_a_buf);
                for (int jr = 0; jr < nc; jr += NR)
                    for (int ir = 0; ir < mc; ir += MR)
                        im->ukernel(kc, pack_a_buf + (size_t)ir * kc,
                                    qkv_gemm_pack_b + (size_t)jr * kc,
                                    C + (size_t)(ic + ir) * n + jc + jr, n,
                                    mc - ir < MR ? mc - ir : MR, nc - jr < NR ? nc - jr : NR);
            }
        }
    }
}

/* ---- the entry point ---------------------------------------------------- */

int qkv_gemm_blocked(int m, int n, int k)
{
    return m >= BLOCKED_MIN && n >= BLOCKED_MIN && k >= 8;
}

void qkv_gemm(int ta, int tb, int m, int n, int k, const qkv_real *A, const qkv_real *B,
              qkv_real *C, int accumulate)
{
    const qkv_kernel_set *im = qkv_kernels();
    /* The order of the additions depends on the shape alone, the same for
     * every kernel set: blocks where packing once paid off, the direct
     * paths' chains below, and dot products where the portable direct
     * path could not copy QKV_DIRECT_NR columns of a transposed B (or all
     * of them, if fewer). A set's gemm repeats it with any tiling. */
    qkv_gemm_order order = QKV_GEMM_CHAIN;
    if (qkv_gemm_blocked(m, n, k))
        order = QKV_GEMM_BLOCKS;
    else if (tb && qkv_gemm_takes_dots(n, k))
        order = QKV_GEMM_DOTS;
    /* C = A·B is C += A·B on a zeroed C; in the blocks order a set may
     * store its first sums instead (0 + sum, the same bits), which spares
     * a pass over C that evicts what the product needs. In the chain order
     * the portable direct path, and a set's gemm with gemm_stores, starts each
     * chain from a zero of its own (the chain from a zeroed C, -0 kept):
     * no memset, and no loads of C that wait behind the masked stores of
     * the rows above */
    const int by_gemm = im->gemm != NULL;
    int store = 0;
    if (!accumulate && order == QKV_GEMM_CHAIN && k > 0) /* k = 0: no chain writes C */
        store = by_gemm ? im->gemm_stores : 1;
    else if (!accumulate && order == QKV_GEMM_BLOCKS)
        store = by_gemm && im->gemm_stores;
    if (!accumulate && !store)
        memset(C, 0, (size_t)m * n * sizeof *C);
    if (by_gemm)
        im->gemm(&(qkv_gemm_args){order, ta, tb, m, n, k, A, B, C, store});
    else if (order == QKV_GEMM_BLOCKS)
        gemm_blocked(im, ta, tb, m, n, k, A, B, C);
    else
        im->direct(ta, tb, m, n, k, A, B, C, store);
}

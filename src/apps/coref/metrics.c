/*
 * metrics.c - what the experiments measure on a forward pass of the
 * coreference model: accuracy, the attention rows' entropy, largest weight
 * and softmax Jacobian, the scores' variance, and the attention mass on the
 * antecedent.
 */
#include <math.h>
#include <string.h>

#include "apps/coref/model.h"

double qkv_coref_entropy(const qkv_real *p, size_t n)
{
    double h = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] > 0)
            h -= (double)p[i] * log((double)p[i]);
    return h;
}

double qkv_coref_jacobian_norm(const qkv_real *a, size_t n)
{
    /* ||J||² = Σ_i a_i²(1-a_i)² + Σ_{i≠j} a_i²a_j²
     *        = Σ_i a_i²(1-a_i)² + (Σ_i a_i²)² - Σ_i a_i⁴ */
    double diag = 0, sq = 0, quad = 0;
    for (size_t i = 0; i < n; i++) {
        double x = a[i], x2 = x * x;
        diag += x2 * (1 - x) * (1 - x);
        sq += x2;
        quad += x2 * x2;
    }
    double f = diag + sq * sq - quad;
    return sqrt(f > 0 ? f : 0);
}

int qkv_coref_predict(const qkv_coref_out *f, int i, double *p)
{
    int C = f->logits->shape[1], best = 0;
    const qkv_real *row = f->logits->data + (size_t)i * C;
    double sum = 0;
    for (int c = 1; c < C; c++)
        if (row[c] > row[best])
            best = c;
    for (int c = 0; c < C; c++)
        sum += exp((double)row[c] - row[best]);
    if (p != NULL)
        *p = 1 / sum;
    return best;
}

void qkv_coref_stats_of(const qkv_coref_out *f, const qkv_coref_batch *b, qkv_coref_stats *st)
{
    memset(st, 0, sizeof *st);
    const int T = b->T;
    long rows = 0, pairs = 0, marked = 0;
    double ssum = 0, ssq = 0;
    st->loss = f->loss->data[0];
    st->items = b->B;
    for (int i = 0; i < b->B; i++) {
        int n = b->len[i];
        st->correct += qkv_coref_predict(f, i, NULL) == b->target[i];
        if (f->attn == NULL || f->scores == NULL) /* a rows_only forward pass */
            continue;
        for (int r = 0; r < n; r++) {
            const qkv_real *a = f->attn->data + ((size_t)i * T + r) * T;
            const qkv_real *s = f->scores->data + ((size_t)i * T + r) * T;
            double mx = 0;
            for (int j = 0; j < n; j++) {
                mx = a[j] > mx ? a[j] : mx;
                ssum += s[j];
                ssq += (double)s[j] * s[j];
            }
            st->entropy += qkv_coref_entropy(a, (size_t)n);
            st->jacobian += qkv_coref_jacobian_norm(a, (size_t)n);
            st->max_weight += mx;
            rows++;
            pairs += n;
        }
        if (b->mark[i] >= 0) {
            const qkv_real *a = f->attn->data + ((size_t)i * T + b->query[i]) * T;
            for (int j = 0; j < n; j++)
                if (b->ids[(size_t)i * b->cap_t + j] == b->mark[i])
                    st->mark_mass += a[j];
            marked++;
        }
    }
    if (rows > 0) {
        st->entropy /= (double)rows;
        st->jacobian /= (double)rows;
        st->max_weight /= (double)rows;
        double mean = ssum / (double)pairs;
        st->score_var = ssq / (double)pairs - mean * mean;
    }
    if (marked > 0)
        st->mark_mass /= (double)marked;
}

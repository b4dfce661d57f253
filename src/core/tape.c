/*
 * tape.c - the arena, the nodes, sticky errors and the backward pass.
 *
 * Memory: a list of blocks. Allocation bumps a pointer through the current
 * block and moves on to the next block when it is full, creating a block
 * only when the list runs out. Reset rewinds to the first block and keeps
 * them all, so a step that needs no more memory than an earlier one
 * allocates nothing. Nodes live in the arena too, each pointing at the one
 * before it, so backward is a walk from the last node to the first that
 * calls each node's own backward function: the tape knows no op.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "qkv/tape.h"
#include "util/util.h"

#define ALIGN 64u
#define DEFAULT_ARENA (1u << 20)
#define MAX_BLOCKS 48

struct qkv_tape {
    unsigned char *block[MAX_BLOCKS]; /* (block_cap[i]) arena memory */
    size_t block_cap[MAX_BLOCKS];
    size_t block_used[MAX_BLOCKS]; /* bytes used in each block before cur */
    int n_blocks;
    int cur;         /* block being filled */
    size_t cur_used; /* bytes used in it */
    size_t in_use;   /* bytes handed out since the last reset */
    size_t high_water;

    const qkv_node *last; /* the newest node; each points at the one before */
    size_t n_nodes;

    qkv_error err;    /* the first error since the last reset */
    int err_reworded; /* err says where it happened (qkv_tape_reword_failure) */
    int grad_on;
    int backward_done;
    struct grad_hdr *grads; /* every gradient made since the last reset, newest first */
};

/* The header in front of each tape gradient. A gradient is zero-filled
 * when backward first needs it, not when the tensor is made: the forward
 * pass then never touches gradient memory, and each gradient is cleared
 * just before the op that adds into it, while it is in cache. Views share
 * the buffer and so the header. */
typedef struct grad_hdr {
    struct grad_hdr *next;
    size_t bytes;
    int stale; /* not yet zero-filled */
} grad_hdr;
#define GRAD_HDR ALIGN /* bytes in front of the gradient, keeping it aligned */

static size_t round_up(size_t n)
{
    return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

static void *block_alloc(size_t n)
{
    return qkv_aligned_alloc(ALIGN, round_up(n ? n : 1));
}

qkv_tape *qkv_tape_new_abi(unsigned abi, size_t arena_bytes, qkv_error *err)
{
    if (!qkv_abi_ok(abi, err))
        return NULL;
    size_t cap = round_up(arena_bytes ? arena_bytes : DEFAULT_ARENA);
    if (cap < arena_bytes) {
        qkv_error_set(err, QKV_ERR_NOMEM, "tape: an arena of %zu bytes is too large", arena_bytes);
        return NULL;
    }
    qkv_tape *t = qkv_calloc(1, sizeof *t);
    if (t != NULL && (t->block[0] = block_alloc(cap)) == NULL) {
        free(t);
        t = NULL;
    }
    if (t == NULL) {
        qkv_error_set(err, QKV_ERR_NOMEM, "tape: out of memory for an arena of %zu bytes", cap);
        return NULL;
    }
    t->block_cap[0] = cap;
    t->n_blocks = 1;
    t->err = qkv_error_none();
    t->err_reworded = 0;
    t->grad_on = 1;
    return t;
}

void qkv_tape_free(qkv_tape *t)
{
    if (t == NULL)
        return;
    for (int i = 0; i < t->n_blocks; i++)
        free(t->block[i]);
    free(t);
}

void qkv_tape_reset(qkv_tape *t)
{
    if (t == NULL)
        return;
    t->cur = 0;
    t->cur_used = 0;
    t->in_use = 0;
    t->last = NULL;
    t->n_nodes = 0;
    t->err = qkv_error_none();
    t->err_reworded = 0;
    t->backward_done = 0;
    t->grads = NULL;
}

qkv_status qkv_tape_status(const qkv_tape *t)
{
    return t != NULL ? t->err.status : QKV_ERR_ARG;
}

const char *qkv_tape_error(const qkv_tape *t)
{
    return t != NULL ? t->err.message : "no tape (NULL): did qkv_tape_new fail?";
}

qkv_status qkv_tape_fail(qkv_tape *t, qkv_status s, const char *fmt, ...)
{
    if (t == NULL)
        return QKV_ERR_ARG;
    if (t->err.status != QKV_OK || s == QKV_OK)
        return t->err.status;
    va_list ap;
    va_start(ap, fmt);
    qkv_verror(&t->err, s, fmt, ap);
    va_end(ap);
    return s;
}

void qkv_tape_name_failure(qkv_tape *t, const char *op)
{
    static const char *const own[] = {"tape: ", "tensor: ", "output: "};
    if (t == NULL || t->err.status == QKV_OK || op == NULL)
        return;
    char *m = t->err.message;
    const size_t cap = sizeof t->err.message;
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        const size_t k = strlen(own[i]);
        if (strncmp(m, own[i], k) != 0)
            continue;
        const size_t head = strlen(op) + 2; /* "op: " */
        size_t rest = strlen(m + k);
        if (head >= cap)
            return;
        if (head + rest >= cap) /* cut the end, as qkv_tape_fail would */
            rest = cap - 1 - head;
        memmove(m + head, m + k, rest);
        m[head + rest] = '\0';
        memcpy(m, op, head - 2);
        memcpy(m + head - 2, ": ", 2);
        return;
    }
}

void qkv_tape_reword_failure(qkv_tape *t, size_t drop, const char *head)
{
    if (t == NULL || t->err.status == QKV_OK || t->err_reworded || head == NULL)
        return;
    t->err_reworded = 1;
    char rest[sizeof t->err.message];
    const size_t n = strlen(t->err.message), k = drop < n ? drop : n;
    memcpy(rest, t->err.message + k, n - k + 1);
    /* the message is escaped already, and escaping it again changes nothing */
    qkv_error_set(&t->err, t->err.status, "%s%s", head, rest);
}

int qkv_tape_set_grad(qkv_tape *t, int enabled)
{
    if (t == NULL)
        return 0;
    int old = t->grad_on;
    t->grad_on = enabled != 0;
    return old;
}

int qkv_tape_grad_enabled(const qkv_tape *t)
{
    return t != NULL && t->grad_on;
}

/* qkv_tape_alloc, for a tensor of the given shape, which an out-of-memory
 * error then names (ndim < 0: not a tensor's values) */
static void *arena_alloc(qkv_tape *t, size_t n, int ndim, const int *shape)
{
    if (t == NULL)
        return NULL;
    size_t need = round_up(n ? n : 1);
    if (need < n) {
        qkv_tape_fail(t, QKV_ERR_NOMEM, "tape: request of %zu bytes overflows", n);
        return NULL;
    }
    /* the first block from the current one on with room, else a new one */
    while (t->cur < t->n_blocks && t->block_cap[t->cur] - t->cur_used < need) {
        t->block_used[t->cur++] = t->cur_used; /* the rest of it stays unused */
        t->cur_used = 0;
    }
    if (t->cur == t->n_blocks) {
        size_t sz = 2 * t->block_cap[t->n_blocks - 1];
        sz = need > sz ? need : sz;
        unsigned char *p = t->n_blocks < MAX_BLOCKS ? block_alloc(sz) : NULL;
        if (p == NULL) {
            t->cur = t->n_blocks - 1; /* stay on a real block */
            t->cur_used = t->block_cap[t->cur];
            /* the tensor's shape, if it is one; the reset hint only where
             * the arena has more in use than the request: one huge tensor is no
             * forgotten reset */
            char what[80] = "";
            if (ndim >= 0) {
                memcpy(what, " for a tensor ", 15);
                qkv_dims_str(ndim, shape, what + 14, sizeof what - 14);
            }
            qkv_tape_fail(
                t, QKV_ERR_NOMEM,
                "tape: out of memory allocating %zu bytes%s (the arena has %zu bytes in use)%s", n,
                what, t->in_use, t->in_use >= need ? "; did a loop forget qkv_tape_reset?" : "");
            return NULL;
        }
        t->block[t->n_blocks] = p;
        t->block_cap[t->n_blocks++] = sz;
    }
    void *p = t->block[t->cur] + t->cur_used;
    t->cur_used += need;
    t->in_use += need;
    if (t->in_use > t->high_water)
        t->high_water = t->in_use;
    return p;
}

void *qkv_tape_alloc(qkv_tape *t, size_t n)
{
    return arena_alloc(t, n, -1, NULL);
}

qkv_tensor *qkv_tape_tensor(qkv_tape *t, int ndim, const int *shape, int with_grad)
{
    size_t n, bytes;
    if (t == NULL || t->err.status != QKV_OK)
        return qkv_nil();
    qkv_status s = qkv_shape_numel(ndim, shape, &n);
    if (s != QKV_OK) { /* say what is wrong, naming the shape */
        char why[128];
        qkv_shape_problem(ndim, shape, s, why, sizeof why);
        qkv_tape_fail(t, s, "tensor: %s", why);
        return qkv_nil();
    }
    with_grad = with_grad && t->grad_on;
    bytes = n * sizeof(qkv_real);
    qkv_tensor *x = qkv_tape_alloc(t, sizeof *x);
    qkv_real *data = arena_alloc(t, bytes, ndim, shape);
    grad_hdr *h = with_grad ? arena_alloc(t, GRAD_HDR + bytes, ndim, shape) : NULL;
    if (x == NULL || data == NULL || (with_grad && h == NULL))
        return qkv_nil();
    x->data = data;
    x->grad = NULL;
    x->numel = n;
    x->ndim = ndim;
    for (int i = 0; i < QKV_MAX_DIMS; i++)
        x->shape[i] = i < ndim ? shape[i] : 1;
    x->flags = QKV_TENSOR_TAPE;
    if (h != NULL) {
        x->grad = (qkv_real *)(void *)((unsigned char *)h + GRAD_HDR);
        x->flags |= QKV_TENSOR_LAZY_GRAD;
        h->bytes = bytes;
        h->stale = 1;
        h->next = t->grads;
        t->grads = h;
        if (t->backward_done) /* no backward will clear it */
            qkv_tensor_grad_ready(x);
    }
    return x;
}

/* A node's inputs follow it in the same allocation, aligned. */
_Static_assert(sizeof(qkv_node) % _Alignof(qkv_tensor *) == 0, "qkv_node's size");

/* Nonzero if p points into one of t's arena blocks. */
static int in_arena(const qkv_tape *t, const void *p)
{
    const uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < t->n_blocks; i++) {
        const uintptr_t lo = (uintptr_t)t->block[i];
        if (a >= lo && a - lo < t->block_cap[i])
            return 1;
    }
    return 0;
}

int qkv_tape_is_stale(const qkv_tape *t, const qkv_tensor *x)
{
    if (t == NULL || x == NULL || x == qkv_nil())
        return 0;
    /* live: below the frontier of the current block, or of a block the
     * tape moved past since the reset (whose unused end is not) */
    const uintptr_t a = (uintptr_t)x;
    for (int i = 0; i < t->n_blocks; i++) {
        const uintptr_t lo = (uintptr_t)t->block[i];
        if (a >= lo && a - lo < t->block_cap[i])
            return i > t->cur || a - lo >= (i == t->cur ? t->cur_used : t->block_used[i]);
    }
    return 0;
}

qkv_node *qkv_tape_record(qkv_tape *t, const qkv_op_def *op, qkv_tensor *out, int n_in,
                          qkv_tensor *const *in)
{
    if (t == NULL || op == NULL || n_in < 0 || n_in > QKV_NODE_MAX_INPUTS ||
        (n_in > 0 && in == NULL)) {
        qkv_tape_fail(t, QKV_ERR_ARG, "tape: a node needs an op and 0 to %d inputs",
                      QKV_NODE_MAX_INPUTS);
        return NULL;
    }
    const char *name = op->name != NULL ? op->name : "tape";
    if (op->backward == NULL) { /* qkv_backward would call it */
        qkv_tape_fail(t, QKV_ERR_ARG, "%s: the op has no backward function", name);
        return NULL;
    }
    if (qkv_tensor_is_nil(out) || out->grad == NULL) {
        qkv_tape_fail(t, QKV_ERR_ARG, "%s: a node's output must have a gradient", name);
        return NULL;
    }
    /* its gradient in this tape's arena: not a heap tensor's, another
     * tape's, or a parameter's behind a view made here */
    if (!(out->flags & QKV_TENSOR_TAPE) || !in_arena(t, out->grad)) {
        qkv_tape_fail(t, QKV_ERR_ARG,
                      "%s: a node's output must be made on its tape (qkv_tape_tensor), "
                      "not elsewhere",
                      name);
        return NULL;
    }
    for (int i = 0; i < n_in; i++) {
        if (in[i] == NULL) { /* an optional input left out: count only those given */
            qkv_tape_fail(t, QKV_ERR_ARG, "%s: input %d of the node is NULL", name, i);
            return NULL;
        }
        /* kept across a reset: backward would add into memory the tape
         * hands out again (the library's ops refuse it before this; an op
         * of one's own may not) */
        if (qkv_tape_is_stale(t, in[i])) {
            qkv_tape_fail(t, QKV_ERR_ARG,
                          "%s: input %d was made on this tape before its last qkv_tape_reset; "
                          "record it again, or keep it in a heap tensor (qkv_tensor_new)",
                          name, i);
            return NULL;
        }
        /* a gradient another tape made: this tape's backward would add
         * into it and stop, never reaching the nodes that made the input */
        if ((in[i]->flags & QKV_TENSOR_LAZY_GRAD) && in[i]->grad != NULL &&
            !in_arena(t, in[i]->grad)) {
            qkv_tape_fail(t, QKV_ERR_ARG,
                          "%s: input %d was made on another tape, whose nodes its gradient "
                          "would not reach",
                          name, i);
            return NULL;
        }
    }
    qkv_node *n = qkv_tape_alloc(t, sizeof *n + (size_t)n_in * sizeof n->in[0]);
    if (n == NULL) { /* out of memory: the op's, by its name */
        qkv_tape_name_failure(t, op->name);
        return NULL;
    }
    memset(n, 0, sizeof *n);
    n->in = (qkv_tensor **)(n + 1);
    n->op = op;
    n->prev = t->last;
    n->out = out;
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++)
        n->in[i] = in[i];
    t->last = n;
    t->n_nodes++;
    return n;
}

/* A link from an extra output to its node's output (qkv_tape_record_output):
 * backward has readied its input, main's gradient, when it runs; nothing
 * else is left to do. */
static void output_backward(const qkv_node *n)
{
    (void)n;
}

static const qkv_op_def op_output = {"output", output_backward, 0};

qkv_node *qkv_tape_record_output(qkv_tape *t, qkv_tensor *extra, qkv_tensor *main)
{
    if (t == NULL)
        return NULL;
    if (qkv_tensor_is_nil(main) || main->grad == NULL) { /* extra: qkv_tape_record checks it */
        qkv_tape_fail(t, QKV_ERR_ARG, "output: the node's output must have a gradient");
        return NULL;
    }
    /* the node that made main, usually just behind: run_backward asks it
     * whether it readies extra's gradient itself */
    const qkv_node *made = t->last;
    while (made != NULL && made->out != main)
        made = made->prev;
    qkv_node *n = qkv_tape_record(t, &op_output, extra, 1, &main);
    if (n != NULL)
        n->state = (void *)(uintptr_t)made;
    return n;
}

/* A link whose extra output no gradient reached: the backward of the node
 * that made it, if it runs, reads that gradient, which must then read as
 * zero, as every gradient does after backward. An op that claims its
 * gradients readies it itself (attention claims its scores' and weights'
 * and overwrites them), so it is left to it; for any other, filling it
 * now costs what the fill at the end of backward would. */
static void ready_unreached_extra(const qkv_node *link)
{
    const qkv_node *made = link->state;
    if (made == NULL || !(made->op->flags & QKV_OP_CLAIMS_GRADS))
        qkv_tensor_grad_ready(link->out);
}

/* x's gradient header, or NULL when x has no lazily filled gradient. */
static grad_hdr *hdr_of(const qkv_tensor *x)
{
    if (x == NULL || x->grad == NULL || !(x->flags & QKV_TENSOR_LAZY_GRAD))
        return NULL;
    return (grad_hdr *)(void *)((unsigned char *)x->grad - GRAD_HDR);
}

/* Nonzero if h is the header of a gradient made since the last reset. A
 * tensor kept from before a reset points into memory the tape still owns,
 * so in_arena alone cannot tell. */
static int live_grad(const qkv_tape *t, const grad_hdr *h)
{
    for (const grad_hdr *g = t->grads; g != NULL; g = g->next)
        if (g == h)
            return 1;
    return 0;
}

/* Checks that backward may start from y (n values of seed); records why
 * not. */
static qkv_status backward_ok(qkv_tape *t, const char *name, const qkv_tensor *y, size_t n)
{
    if (t->err.status != QKV_OK)
        return t->err.status;
    if (qkv_tensor_is_nil(y)) /* no op failed, or the tape would say why */
        return qkv_tape_fail(t, QKV_ERR_ARG, "%s: the tensor is nil (NULL, or qkv_nil())", name);
    if (y->grad == NULL || !(y->flags & QKV_TENSOR_TAPE))
        return qkv_tape_fail(t, QKV_ERR_ARG,
                             "%s: the tensor has no gradient on this tape: it was made "
                             "elsewhere, or from nothing that needs a gradient, or while "
                             "qkv_tape_set_grad(t, 0) was on",
                             name);
    if (!(y->flags & QKV_TENSOR_LAZY_GRAD)) /* a reshape view of a parameter, say */
        return qkv_tape_fail(t, QKV_ERR_ARG,
                             "%s: the tensor is a view of one not made on this tape (a "
                             "parameter?); its gradient would be overwritten, not added to",
                             name);
    if (!in_arena(t, y->grad)) /* its nodes, if any, are on that tape */
        return qkv_tape_fail(t, QKV_ERR_ARG,
                             "%s: the tensor must be made on this tape, not another one", name);
    if (!live_grad(t, hdr_of(y))) /* its nodes are forgotten */
        return qkv_tape_fail(t, QKV_ERR_ARG,
                             "%s: the tensor was made before the last qkv_tape_reset; record "
                             "it again",
                             name);
    if (y->numel != n) {
        char sy[64];
        qkv_shape_str(y, sy, sizeof sy);
        return qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: %s has %zu values, the seed %zu", name, sy,
                             y->numel, n);
    }
    if (t->backward_done)
        return qkv_tape_fail(t, QKV_ERR_ARG,
                             "%s: already run on this recording; call qkv_tape_reset and record "
                             "again",
                             name);
    return QKV_OK;
}

/* Zero-fills the gradient behind h if nothing has filled it yet. */
static void fill_zero(grad_hdr *h)
{
    if (h != NULL && h->stale) {
        memset((unsigned char *)h + GRAD_HDR, 0, h->bytes);
        h->stale = 0;
    }
}

void qkv_tensor_grad_ready(qkv_tensor *x)
{
    fill_zero(hdr_of(x));
}

int qkv_tensor_grad_claim(qkv_tensor *x)
{
    grad_hdr *h = hdr_of(x); /* views are whole: the claim covers the buffer */
    if (h == NULL || !h->stale)
        return 0;
    h->stale = 0;
    return 1;
}

/* Runs the backward of every node that the seed reaches, newest first,
 * zero-filling the gradients each one reads or adds into just before it
 * runs (an op that claims its inputs' gradients readies them itself, and
 * overwrites the ones no node has filled yet); then zero-fills the
 * gradients that no node touched, so that every gradient reads as zero or
 * as its sum. A node whose output gradient nothing has filled when its
 * turn comes is not reached: nothing the seed depends on flows through
 * it, and it is skipped, as PyTorch never visits it. Run anyway, its zero
 * output gradient could still put NaN into its inputs' gradients (0·inf
 * in the backward of a metric recorded after the loss, say). */
static void run_backward(qkv_tape *t)
{
    t->backward_done = 1;
    for (const qkv_node *n = t->last; n != NULL; n = n->prev) {
        const grad_hdr *h = hdr_of(n->out);
        if (h != NULL && h->stale) {
            if (n->op == &op_output)
                ready_unreached_extra(n);
            continue;
        }
        if (!(n->op->flags & QKV_OP_CLAIMS_GRADS))
            for (int i = 0; i < n->n_in; i++)
                qkv_tensor_grad_ready(n->in[i]);
        n->op->backward(n);
    }
    for (grad_hdr *h = t->grads; h != NULL; h = h->next)
        fill_zero(h);
}

qkv_status qkv_backward(qkv_tape *t, qkv_tensor *loss)
{
    if (t == NULL)
        return QKV_ERR_ARG;
    if (t->err.status == QKV_OK && !qkv_tensor_is_nil(loss) && loss->numel != 1) {
        char sl[64];
        qkv_shape_str(loss, sl, sizeof sl);
        return qkv_tape_fail(t, QKV_ERR_ARG,
                             "backward: the loss must be a scalar, not %s (qkv_backward_from "
                             "starts from any tensor)",
                             sl);
    }
    qkv_status s = backward_ok(t, "backward", loss, 1);
    if (s != QKV_OK)
        return s;
    qkv_tensor_grad_ready(loss);
    loss->grad[0] = 1;
    run_backward(t);
    return QKV_OK;
}

qkv_status qkv_backward_from(qkv_tape *t, qkv_tensor *y, const qkv_real *dy, size_t n)
{
    if (t == NULL)
        return QKV_ERR_ARG;
    if (dy == NULL)
        return qkv_tape_fail(t, QKV_ERR_ARG, "backward_from: no seed gradient (NULL)");
    qkv_status s = backward_ok(t, "backward_from", y, n);
    if (s != QKV_OK)
        return s;
    (void)qkv_tensor_grad_claim(y); /* overwritten in full: no zero fill first */
    memmove(y->grad, dy, n * sizeof *dy);
    run_backward(t);
    return QKV_OK;
}

size_t qkv_tape_nodes(const qkv_tape *t)
{
    return t != NULL ? t->n_nodes : 0;
}

/* The depth of the node that made tensor x: 0 for a tensor no node made
 * (a parameter, an input). An open-addressing table from the tensor's data
 * to depth: a reshape view is another tensor over the same data, made by
 * no node, and its depth is its base's. */
typedef struct depth_slot {
    const qkv_real *key;
    size_t depth;
} depth_slot;

static size_t slot_of(const qkv_real *x, size_t mask)
{
    uintptr_t h = (uintptr_t)x;
    h ^= h >> 17;
    h *= (uintptr_t)0x9E3779B97F4A7C15u;
    return (size_t)(h >> 7) & mask;
}

qkv_status qkv_tape_critical_path(const qkv_tape *t, size_t *length)
{
    if (t == NULL || length == NULL)
        return QKV_ERR_ARG;
    *length = 0;
    if (t->n_nodes == 0)
        return QKV_OK;
    size_t cap = 16;
    while (cap < 2 * t->n_nodes)
        cap *= 2;
    const qkv_node **order = qkv_malloc(sizeof *order * t->n_nodes);
    depth_slot *table = qkv_calloc(cap, sizeof *table);
    if (order == NULL || table == NULL) {
        free(order);
        free(table);
        return QKV_ERR_NOMEM;
    }
    size_t k = t->n_nodes;
    for (const qkv_node *n = t->last; n != NULL; n = n->prev)
        order[--k] = n;
    /* in recording order, each node one deeper than its deepest input (a
     * link to an extra output as deep as its node) */
    for (size_t i = 0; i < t->n_nodes; i++) {
        const qkv_node *n = order[i];
        size_t d = 0;
        for (int j = 0; j < n->n_in; j++)
            for (size_t s = slot_of(n->in[j]->data, cap - 1); table[s].key != NULL;
                 s = (s + 1) & (cap - 1))
                if (table[s].key == n->in[j]->data) {
                    d = table[s].depth > d ? table[s].depth : d;
                    break;
                }
        size_t s = slot_of(n->out->data, cap - 1);
        while (table[s].key != NULL && table[s].key != n->out->data)
            s = (s + 1) & (cap - 1);
        table[s].key = n->out->data;
        if (n->op != &op_output)
            d++;
        table[s].depth = d;
        *length = d > *length ? d : *length;
    }
    free(order);
    free(table);
    return QKV_OK;
}

size_t qkv_tape_bytes_used(const qkv_tape *t)
{
    return t != NULL ? t->in_use : 0;
}

size_t qkv_tape_high_water(const qkv_tape *t)
{
    return t != NULL ? t->high_water : 0;
}

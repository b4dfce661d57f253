/*
 * internal.h - declarations shared between qkv's source files. Never
 * installed; nothing here is public API.
 */
#ifndef QKV_INTERNAL_H
#define QKV_INTERNAL_H

#include "qkv/tape.h"

/* Tensor flag for tensors that live in a tape's arena. */
#define QKV_TENSOR_TAPE 4u

typedef enum qkv_op {
    QKV_OP_MATMUL,
    QKV_OP_MATMUL_NT,
    QKV_OP_TRANSPOSE,
    QKV_OP_SCALE,
    QKV_OP_ADD,
    QKV_OP_MUL,
    QKV_OP_SUM,
    QKV_OP_SUM_LAST,
    QKV_OP_GATHER,
    QKV_OP_PICK,
    QKV_OP_MASK,
    QKV_OP_SOFTMAX,
    QKV_OP_LOG_SOFTMAX,
    QKV_OP_CROSS_ENTROPY,
    QKV_OP_TANH,
    QKV_OP_RELU,
    QKV_OP_ATTENTION
} qkv_op;

/* One recorded op: what backward needs, nothing more. */
typedef struct qkv_node {
    qkv_op op;
    qkv_tensor *out;  /* the op's result; its grad is dL/dout */
    qkv_tensor *a;    /* first input */
    qkv_tensor *b;    /* second input or NULL */
    double c;         /* a constant: the scale, or 1/N for means */
    int *ints;        /* ids, row indices or targets, copied onto the tape */
    qkv_real *saved;  /* extra forward state (cross-entropy probabilities) */
    void *aux;        /* an op's own record, on the tape (attention) */
} qkv_node;

/* Appends a node for out (which must have a gradient) and returns it, or
 * NULL after recording an out-of-memory error. */
qkv_node *qkv_tape_push(qkv_tape *t, qkv_op op, qkv_tensor *out, qkv_tensor *a,
                        qkv_tensor *b);

/* Runs one node's backward pass: adds into a->grad and b->grad (those that
 * exist) from out->grad. Defined in ops.c. */
void qkv_node_backward(const qkv_node *n);

/* ---- shared by the ops (ops.c, attention.c) ---- */

/* Nonzero when an op may run: the tape has no error and the inputs are real
 * tensors (b only if want_b). Records an error naming op for a nil input. */
int qkv_inputs_ok(qkv_tape *t, const char *op, const qkv_tensor *a, const qkv_tensor *b,
                  int want_b);

/* Nonzero when a or b (which may be NULL) tracks a gradient. */
int qkv_wants_grad(const qkv_tensor *a, const qkv_tensor *b);

/* Records a node for out when out tracks a gradient. Returns the node, or
 * NULL when none is needed or the tape ran out of memory (then *failed). */
qkv_node *qkv_record(qkv_tape *t, qkv_op op, qkv_tensor *out, qkv_tensor *a, qkv_tensor *b,
                     int *failed);

/* The index of the first of n ids outside [0,rows), or n if there is none. */
size_t qkv_first_bad_id(const int *ids, size_t n, int rows);

/* Copies n ints onto the tape; NULL after recording an error. */
int *qkv_tape_ints(qkv_tape *t, const int *src, size_t n);

/* Both shapes padded on the left to four dimensions; b's strides are zero
 * along the dimensions it broadcasts. */
typedef struct qkv_bcast {
    int dim[4];
    size_t bstride[4];
} qkv_bcast;

/* Plans broadcasting b over a (numpy rules, b no larger); 0 if b does not
 * broadcast. */
int qkv_bcast_plan(const qkv_tensor *a, const qkv_tensor *b, qkv_bcast *p);

/* The attention ops' backward (attention.c). */
void qkv_attention_node_backward(const qkv_node *n);

/* ---- threads (threads.c) ---- */

/* Runs indices [i0,i1) of a job as part `part`. */
typedef void (*qkv_range_fn)(void *ctx, int part, size_t i0, size_t i1);

/* Work (in multiply-adds or so) a part needs to be worth a thread. */
#define QKV_PARALLEL_MIN_WORK ((size_t)1 << 20)

/* Runs fn over [0,n) cut into up to max_parts contiguous ranges, one per
 * thread (qkv_threads), fewer when work is too small to share, and waits
 * for all of them. Parts are numbered from 0; part 0 runs on the caller. A
 * call made while another job runs (from another thread, or from inside a
 * job) runs as one part on its caller. */
void qkv_parallel_for(size_t n, size_t work, int max_parts, qkv_range_fn fn, void *ctx);

/* The number of parts qkv_parallel_for would cut such a job into (at most;
 * fewer if a thread cannot be started). */
int qkv_parallel_parts(size_t n, size_t work, int max_parts);

/* The library's allocation functions: the C ones, counted, so that tests
 * can prove a training step allocates nothing (qkv_alloc_count). */
void *qkv_malloc(size_t n);
void *qkv_calloc(size_t n, size_t size);
void *qkv_realloc(void *p, size_t n);
void *qkv_aligned_alloc(size_t align, size_t n);

/* Overflow-checked size arithmetic: returns 0 and leaves *r alone on
 * overflow. */
int qkv_mul_size(size_t a, size_t b, size_t *r);

#endif

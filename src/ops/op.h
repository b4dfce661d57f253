/*
 * op.h - what the op families share, private to the library: input checks,
 * making and recording outputs, index checks and broadcasting plans. Every
 * op is built from these and the public tape interface (tape.h).
 */
#ifndef QKV_OP_H
#define QKV_OP_H

#include "core/core.h"
#include "qkv/ops.h"
#include "util/util.h"

/* Nonzero when an op may run: the tape exists and has no error, and the
 * inputs are real tensors (b only if want_b) and not kept across a reset
 * (qkv_op_fresh). Records an error naming op for a nil or stale input. */
int qkv_op_inputs_ok(qkv_tape *t, const char *op, const qkv_tensor *a, const qkv_tensor *b,
                     int want_b);

/* Nonzero unless x (which may be NULL) is a tensor made on t before its
 * last reset (qkv_tape_is_stale); records an error naming op if it is.
 * For the inputs qkv_op_inputs_ok does not see, such as a mask or a
 * norm's gain, checked before the op allocates anything. */
int qkv_op_fresh(qkv_tape *t, const char *op, const qkv_tensor *x);

/* Nonzero when a or b (which may be NULL) tracks a gradient. */
int qkv_wants_grad(const qkv_tensor *a, const qkv_tensor *b);

/* Makes a tensor on the tape for op (qkv_tape_tensor); if that fails, the
 * tape's error names op (qkv_tape_name_failure), formatted only then. */
qkv_tensor *qkv_op_tensor(qkv_tape *t, const char *op, int ndim, const int *shape, int with_grad);

/* Makes op's output on the tape (qkv_op_tensor); it tracks a gradient if a
 * or b does. */
qkv_tensor *qkv_op_out(qkv_tape *t, const char *op, int ndim, const int *shape, const qkv_tensor *a,
                       const qkv_tensor *b);

/* Records a node for out with inputs a and b (b may be NULL) when out
 * tracks a gradient. Returns the node, or NULL when none is needed or the
 * tape failed (then *failed is set). */
qkv_node *qkv_op_record(qkv_tape *t, const qkv_op_def *op, qkv_tensor *out, qkv_tensor *a,
                        qkv_tensor *b, int *failed);

/* Finishes an op whose backward needs no more than its inputs and the
 * constant c: records the node and returns out, or nil if recording
 * failed. */
qkv_tensor *qkv_op_finish(qkv_tape *t, const qkv_op_def *op, qkv_tensor *out, qkv_tensor *a,
                          qkv_tensor *b, double c);

/* The index of the first of n ids outside [0,rows), or n if there is none. */
size_t qkv_first_bad_id(const int *ids, size_t n, int rows);

/* n bytes on the tape for op's own use (qkv_tape_alloc); if memory runs
 * out, the tape's error names op (qkv_tape_name_failure). */
void *qkv_op_alloc(qkv_tape *t, const char *op, size_t n);

/* Copies n ints onto the tape for op; NULL after recording an error,
 * which names op. */
int *qkv_tape_ints(qkv_tape *t, const char *op, const int *src, size_t n);

/* Declares char sa[64], sb[64] holding the shapes of a and b, for error
 * messages. */
#define QKV_SHAPES(a, b)               \
    char sa[64], sb[64];               \
    qkv_shape_str((a), sa, sizeof sa); \
    qkv_shape_str((b), sb, sizeof sb)

/* Both shapes padded on the left to four dimensions; b's strides are zero
 * along the dimensions it broadcasts. */
typedef struct qkv_bcast {
    int dim[4];
    size_t bstride[4];
} qkv_bcast;

/* Plans broadcasting b over a (numpy rules, b no larger); 0 if b does not
 * broadcast. */
int qkv_bcast_plan(const qkv_tensor *a, const qkv_tensor *b, qkv_bcast *p);

/* Visits every element of a in order; BODY sees ia (index into a) and ib
 * (the broadcast index into b). */
#define QKV_BCAST_LOOP(p, BODY)                                                 \
    do {                                                                        \
        size_t ia = 0;                                                          \
        for (int i0 = 0; i0 < (p).dim[0]; i0++)                                 \
            for (int i1 = 0; i1 < (p).dim[1]; i1++)                             \
                for (int i2 = 0; i2 < (p).dim[2]; i2++)                         \
                    for (int i3 = 0; i3 < (p).dim[3]; i3++, ia++) {             \
                        size_t ib = i0 * (p).bstride[0] + i1 * (p).bstride[1] + \
                                    i2 * (p).bstride[2] + i3 * (p).bstride[3];  \
                        (void)ib;                                               \
                        BODY;                                                   \
                    }                                                           \
    } while (0)

/* numpy broadcasting of a against b, both ways: the output's shape, and
 * for a loop over it padded on the left to four dimensions, each operand's
 * strides (0 along a dimension it broadcasts). */
typedef struct qkv_bcast2 {
    int ndim, shape[QKV_MAX_DIMS]; /* the output */
    int dim[4];
    size_t astride[4], bstride[4];
    int same; /* a and b both have the output's shape: one flat loop */
} qkv_bcast2;

/* Plans a ∘ b; 0 if the shapes do not broadcast (aligned on the right,
 * each pair of sizes equal or one of them 1). */
int qkv_bcast2_plan(const qkv_tensor *a, const qkv_tensor *b, qkv_bcast2 *p);

/* Visits every output element in order; BODY sees io (index into the
 * output), ia and ib (the broadcast indices into a and b). */
#define QKV_BCAST2_LOOP(p, BODY)                                                                 \
    do {                                                                                         \
        size_t io = 0;                                                                           \
        for (int i0 = 0; i0 < (p).dim[0]; i0++)                                                  \
            for (int i1 = 0; i1 < (p).dim[1]; i1++)                                              \
                for (int i2 = 0; i2 < (p).dim[2]; i2++) {                                        \
                    size_t ia = i0 * (p).astride[0] + i1 * (p).astride[1] + i2 * (p).astride[2]; \
                    size_t ib = i0 * (p).bstride[0] + i1 * (p).bstride[1] + i2 * (p).bstride[2]; \
                    for (int i3 = 0; i3 < (p).dim[3];                                            \
                         i3++, io++, ia += (p).astride[3], ib += (p).bstride[3]) {               \
                        BODY;                                                                    \
                    }                                                                            \
                }                                                                                \
    } while (0)

/* A dimension argument as PyTorch takes it (negative counts from the end)
 * checked against ndim: the dimension, or -1 after recording an error. */
int qkv_op_dim(qkv_tape *t, const char *op, const qkv_tensor *x, int dim);

#endif

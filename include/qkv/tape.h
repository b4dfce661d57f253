/*
 * tape.h - the recording half of reverse-mode autodiff.
 *
 * A tape is an arena. Every op called with a tape carves its output tensor
 * from the arena and, while gradients are recorded, appends a node: the op,
 * its inputs, its output and whatever its backward pass needs. Nodes are
 * appended in creation order, which is already an order in which backward
 * can run, so qkv_backward is one reverse walk that calls each node's own
 * backward function; gradients accumulate with +=. qkv_tape_reset forgets
 * every node and tensor at once and keeps the memory for the next step.
 *
 * Errors are sticky: the first failing op records a status and a message,
 * and every later op returns the nil tensor and does nothing.
 *
 * The second half of this header is how an op is written: the library's
 * own ops (src/ops/) use nothing else, so a user's op works the same way.
 */
#ifndef QKV_TAPE_H
#define QKV_TAPE_H

#include "qkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qkv_tape qkv_tape;

/* qkv_tape_new(size_t arena_bytes, qkv_error *err) creates a tape whose
 * arena starts with arena_bytes (0 picks 1 MiB). The arena grows by itself
 * (adding blocks of twice the size) when a step needs more, and keeps the
 * blocks across resets. Returns NULL, with the reason in err, when memory
 * runs out or the program's scalar type differs from the library's
 * (QKV_ERR_ABI). Free with qkv_tape_free. A macro: it passes QKV_ABI. */
qkv_tape *qkv_tape_new_abi(unsigned abi, size_t arena_bytes, qkv_error *err);
#define qkv_tape_new(...) qkv_tape_new_abi(QKV_ABI, __VA_ARGS__)

/* Frees the tape and every tensor it made. Accepts NULL. */
void qkv_tape_free(qkv_tape *t);

/* Forgets every node and tape tensor and clears the error status. Pointers
 * to tape tensors become invalid. All memory is kept and reused, so a step
 * that needs no more than an earlier one allocates nothing. The gradient
 * setting (qkv_tape_set_grad) is kept: a tape left with recording off
 * after an evaluation records nothing after the reset either. Allocates
 * and frees nothing itself. Accepts NULL. */
void qkv_tape_reset(qkv_tape *t);

/* The first error recorded since the last reset, or QKV_OK; QKV_ERR_ARG
 * for a NULL tape. */
qkv_status qkv_tape_status(const qkv_tape *t);

/* The message of that error, e.g. "matmul: [4,8] x [6,6]: inner dimensions
 * differ", or "" when there is none. Valid until the next reset. */
const char *qkv_tape_error(const qkv_tape *t);

/* Records an error (printf-style message) unless one is already recorded.
 * Every error of an op goes through here. Returns the tape's status
 * afterwards (QKV_ERR_ARG for a NULL tape). */
qkv_status qkv_tape_fail(qkv_tape *t, qkv_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Turns gradient recording off (enabled = 0) or back on, until the next
 * call (qkv_tape_reset keeps it). With it off, ops compute values only:
 * they record no backward state and their outputs have no gradient.
 * Returns the previous setting. A new tape records. */
int qkv_tape_set_grad(qkv_tape *t, int enabled);

/* Nonzero while gradients are being recorded. */
int qkv_tape_grad_enabled(const qkv_tape *t);

/* Allocates an uninitialised tensor of the given shape in the arena, with a
 * gradient buffer when with_grad is nonzero and recording is on. Use it for
 * per-step inputs such as masks. Returns nil (and records the error) on a bad
 * shape or when memory runs out.
 *
 * The gradient is zero-filled lazily: backward clears it just before the
 * first node that reads or adds into it (a node's output and inputs), and
 * clears the ones no node touched at its end. So after qkv_backward every
 * gradient holds its sum or zero, and the forward pass never writes
 * gradient memory. Read or write a gradient before backward only after
 * qkv_tensor_grad_ready. */
qkv_tensor *qkv_tape_tensor(qkv_tape *t, int ndim, const int *shape, int with_grad);

/* Zero-fills x's tape gradient now if backward has not yet done so; does
 * nothing for other tensors, or a NULL gradient. A custom op whose backward
 * adds into a tensor other than its node's output and inputs calls it
 * first. */
void qkv_tensor_grad_ready(qkv_tensor *x);

/* Allocates n bytes of scratch memory in the arena, aligned to 64 bytes,
 * valid until the next reset. Returns NULL (and records the error) on
 * failure. */
void *qkv_tape_alloc(qkv_tape *t, size_t n);

/* Backpropagates from loss, a scalar made on this tape while recording: it
 * seeds dloss = 1 and runs the backward of every node that loss depends
 * on, in reverse creation order, adding into the gradients of all inputs
 * that have one (parameters included). Nodes it does not reach (a metric
 * recorded after the loss, say) are skipped, and their gradients read as
 * zero. Call it at most once per recording. Returns the tape status, or
 * QKV_ERR_ARG if loss is not such a scalar (or is a view of a tensor made
 * elsewhere, whose gradient it would overwrite, or was made before the
 * last qkv_tape_reset). */
qkv_status qkv_backward(qkv_tape *t, qkv_tensor *loss);

/* Backpropagates from any tensor y made on this tape while recording,
 * seeding its gradient with dy (n values, as many as y has), as
 * y.backward(dy) does in PyTorch. Returns the tape status, QKV_ERR_SHAPE
 * for a seed of another size, QKV_ERR_ARG as qkv_backward. */
qkv_status qkv_backward_from(qkv_tape *t, qkv_tensor *y, const qkv_real *dy, size_t n);

/* Number of nodes recorded since the last reset. */
size_t qkv_tape_nodes(const qkv_tape *t);

/* The tape's critical path: the number of nodes on its longest chain of
 * dependent nodes (a node depends on the nodes that made its inputs;
 * parameters and inputs made by no node start a chain). However many
 * processors there were, the backward pass needs at least this many steps
 * one after another: a property of the computation, not of the machine.
 * An RNN's grows with the sequence length, attention's does not. Sets
 * *length (0 for an empty tape); QKV_ERR_NOMEM when its scratch table
 * cannot be allocated. */
qkv_status qkv_tape_critical_path(const qkv_tape *t, size_t *length);

/* Nonzero when x is a tape tensor made on t before its last reset whose
 * memory the tape has not handed out again yet: a pointer kept across
 * qkv_tape_reset (an RNN's state carried to the next step, say), which
 * the next allocations would overwrite under it. The ops refuse such an
 * input by name. One whose memory has been handed out again cannot be
 * told from a live tensor: copy what must outlive a reset into a heap
 * tensor (qkv_tensor_new). */
int qkv_tape_is_stale(const qkv_tape *t, const qkv_tensor *x);

/* Arena bytes in use now, and the most ever in use (the high-water mark). */
size_t qkv_tape_bytes_used(const qkv_tape *t);
size_t qkv_tape_high_water(const qkv_tape *t);

/* ---- writing an op ------------------------------------------------------ */
/*
 * An op checks its inputs (qkv_tape_status, then qkv_tape_is_stale, as
 * the library's ops refuse an input kept across a reset before reading
 * it, then shapes, failing with qkv_tape_fail and a message that names the
 * op and the shapes; qkv_tape_record refuses a stale input too, but only
 * after the op has computed from it), makes its
 * output with qkv_tape_tensor (with a gradient when an input has one),
 * computes it, and, when the output has a gradient, records a node whose op
 * definition carries the backward function:
 *
 *   static void twice_backward(const qkv_node *n)   // y = 2x: dx += 2·dy
 *   {
 *       for (size_t i = 0; i < n->out->numel; i++)
 *           n->in[0]->grad[i] += 2 * n->out->grad[i];
 *   }
 *   static const qkv_op_def twice_op = {"twice", twice_backward, 0};
 *   ...
 *   if (y->grad != NULL && qkv_tape_record(t, &twice_op, y, 1, &x) == NULL)
 *       return qkv_nil();
 *
 * Backward runs only for nodes whose output has a gradient, and must add
 * only into the gradients of inputs that have one (in[i]->grad != NULL).
 */

typedef struct qkv_node qkv_node;

/* What every node of one op shares. Define one per op, static const. */
typedef struct qkv_op_def {
    const char *name;                    /* the op's name, e.g. "matmul" */
    void (*backward)(const qkv_node *n); /* adds dL/din from dL/dout */
    unsigned flags;                      /* QKV_OP_*, or 0 */
} qkv_op_def;

/* The backward readies its inputs' gradients itself: for each input, just
 * before writing its gradient, it calls qkv_tensor_grad_claim and then
 * overwrites the whole gradient (claimed) or adds into it (not). Without
 * the flag, backward finds every input's gradient zero-filled or holding
 * its sum so far, and adds. */
#define QKV_OP_CLAIMS_GRADS 1u

/* For a backward of a QKV_OP_CLAIMS_GRADS op: nonzero when x's gradient
 * has not been filled yet, and is now the caller's to overwrite in full
 * (it then counts as filled); zero when the caller must add into it
 * (zero-filled first if it was not). Zero for a NULL gradient. */
int qkv_tensor_grad_claim(qkv_tensor *x);

#define QKV_NODE_MAX_INPUTS 65536 /* the most inputs a node may have (concat's) */

/* One recorded op. The fields after n_in are the op's to fill in. */
struct qkv_node {
    const qkv_op_def *op;
    const qkv_node *prev;       /* the node recorded before this one, or NULL */
    qkv_tensor *out;            /* the op's result; out->grad is dL/dout */
    const qkv_tensor *constant; /* an input that takes no gradient (a mask), or NULL */
    double c;                   /* a constant (a scale, 1/N for a mean) */
    const int *ints;            /* indices copied onto the tape (ids, targets) */
    const qkv_real *saved;      /* forward state kept for backward (probabilities) */
    void *state;                /* anything else: the op's own record, in the arena */
    int n_in;
    qkv_tensor **in; /* (n_in) the inputs gradients flow back to, stored
                        just after the node (a pointer, not a flexible
                        array member, so the header is valid C++) */
};

/* Appends a node for the op's output out (which must have a gradient) with
 * n_in inputs (copied), everything else zero. Returns it, or NULL after
 * recording an error (out of memory, the message then naming the op; no
 * tape; or QKV_ERR_ARG for no op or one without a backward function, an
 * out that is nil, has no gradient or was not made on t, n_in > 0 and no
 * inputs, an input that is NULL: leave an optional input out of in and
 * n_in instead, an input kept across a qkv_tape_reset of t while
 * qkv_tape_is_stale can tell, or an input with a gradient made on another
 * tape, whose nodes backward on t would never reach). */
qkv_node *qkv_tape_record(qkv_tape *t, const qkv_op_def *op, qkv_tensor *out, int n_in,
                          qkv_tensor *const *in);

/* For an op with more than one output (attention's weights beside its
 * result): records that extra, made by the node whose output is main, is
 * another of its outputs. Call it after recording that node. Backward
 * skips a node that no gradient reaches, judged by its output alone; with
 * this link, a gradient that reaches extra reaches main's node too (its
 * backward then finds main's gradient zero-filled or holding its sum), and
 * that backward, which may read extra's gradient, finds it zero-filled or
 * holding its sum as well, whether a gradient reached extra or not (a
 * QKV_OP_CLAIMS_GRADS op claims or readies it itself, as its inputs'). The
 * link counts in qkv_tape_nodes but adds no step to the critical path.
 * Returns the link's node, or NULL after recording an error (no tape, out
 * of memory, or an extra or main without a gradient). */
qkv_node *qkv_tape_record_output(qkv_tape *t, qkv_tensor *extra, qkv_tensor *main);

#ifdef __cplusplus
}
#endif
#endif

/*
 * tape.h - the recording half of reverse-mode autodiff.
 *
 * A tape is an arena plus a list of nodes. Every op called with a tape
 * appends a node (its kind, inputs, output and whatever backward needs) and
 * carves its output tensor from the arena. qkv_backward walks the nodes in
 * reverse and accumulates gradients with +=. qkv_tape_reset forgets every
 * node and tensor at once and keeps the memory for the next step.
 *
 * Errors are sticky: the first failing op records a status and a message,
 * and every later op returns the nil tensor and does nothing.
 */
#ifndef QKV_TAPE_H
#define QKV_TAPE_H

#include "qkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qkv_tape qkv_tape;

/* Creates a tape whose arena starts with arena_bytes (0 picks 1 MiB).
 * The arena grows by itself (adding blocks of twice the size) when a step
 * needs more, and keeps the blocks across resets. Returns NULL only when memory runs out. Free with
 * qkv_tape_free. */
qkv_tape *qkv_tape_new(size_t arena_bytes);

/* Frees the tape and every tensor it made. Accepts NULL. */
void qkv_tape_free(qkv_tape *t);

/* Forgets every node and tape tensor and clears the error status. Pointers
 * to tape tensors become invalid. All memory is kept and reused, so a step
 * that needs no more than an earlier one allocates nothing. Allocates and
 * frees nothing itself. */
void qkv_tape_reset(qkv_tape *t);

/* The first error recorded since the last reset, or QKV_OK. */
qkv_status qkv_tape_status(const qkv_tape *t);

/* The message of that error, e.g. "matmul: [4,8] x [6,6]: inner dimensions
 * differ", or "" when there is none. Valid until the next reset. */
const char *qkv_tape_error(const qkv_tape *t);

/* Records an error (printf-style message) unless one is already recorded.
 * Every error in the library goes through here: a good breakpoint. Returns
 * the tape's status afterwards. */
qkv_status qkv_tape_fail(qkv_tape *t, qkv_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Turns gradient recording off (enabled = 0) or back on. With it off, ops
 * compute values only: they record no backward state and their outputs have
 * no gradient. Returns the previous setting. */
int qkv_tape_set_grad(qkv_tape *t, int enabled);

/* Nonzero while gradients are being recorded. */
int qkv_tape_grad_enabled(const qkv_tape *t);

/* Allocates an uninitialised tensor of the given shape in the arena, with a
 * zeroed gradient when with_grad is nonzero and recording is on. Use it for
 * per-step inputs such as masks. Returns nil (and records the error) on a bad
 * shape or when memory runs out. */
qkv_tensor *qkv_tape_tensor(qkv_tape *t, int ndim, const int *shape, int with_grad);

/* Allocates n bytes of scratch memory in the arena, aligned to 64 bytes,
 * valid until the next reset. Returns NULL (and records the error) on
 * failure. */
void *qkv_tape_alloc(qkv_tape *t, size_t n);

/* Backpropagates from loss, a scalar made on this tape while recording: it
 * seeds dloss = 1 and runs every node's backward in reverse creation order,
 * adding into the gradients of all inputs that have one (parameters
 * included). Call it at most once per recording. Returns the tape status, or
 * QKV_ERR_ARG if loss is not such a scalar. */
qkv_status qkv_backward(qkv_tape *t, qkv_tensor *loss);

/* Number of nodes recorded since the last reset. */
size_t qkv_tape_nodes(const qkv_tape *t);

/* Arena bytes in use now, and the most ever in use (the high-water mark). */
size_t qkv_tape_bytes_used(const qkv_tape *t);
size_t qkv_tape_high_water(const qkv_tape *t);

#ifdef __cplusplus
}
#endif
#endif

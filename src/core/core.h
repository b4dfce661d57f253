/*
 * core.h - what the tape offers the ops beyond its public interface
 * (qkv/tape.h), private to the library.
 */
#ifndef QKV_CORE_H
#define QKV_CORE_H

#include <stddef.h>

#include "qkv/tape.h"

/* Names op in t's error when the tape itself set it (a message beginning
 * "tape: " or "tensor: ", such as running out of memory for a tensor, or
 * "output: ", qkv_tape_record_output's): that prefix becomes "op: ". Any
 * other error, or none, is left as it is. For an op to call after an
 * allocation failed, so the cost is paid only then. */
void qkv_tape_name_failure(qkv_tape *t, const char *op);

/* Puts head in place of the first drop bytes of t's error message (kept
 * to the message's room as qkv_tape_fail keeps it: the start and the
 * end), once: nothing when t has no error or its message was reworded
 * since the error, so the first to say where an error happened (the
 * innermost layer) is the one that stays. */
void qkv_tape_reword_failure(qkv_tape *t, size_t drop, const char *head);

/* What is wrong with a shape that qkv_shape_numel refused with s, one
 * clause naming the shape (or the count of dimensions) into buf: "the
 * shape [4,0] has a dimension below 1". For the messages of
 * qkv_tensor_new and qkv_tape_tensor, which refuse the same shapes. */
void qkv_shape_problem(int ndim, const int *shape, qkv_status s, char *buf, size_t len);

#endif

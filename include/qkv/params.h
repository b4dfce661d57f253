/*
 * params.h - a named list of parameters that owns its tensors, the
 * initialisers that fill them from the library's CPython-compatible RNG,
 * and an optimizer over the whole list.
 *
 * A model is a parameter list plus layers (layers.h) that point into it:
 * the list saves and loads as safetensors (safetensors.h), zeroes every
 * gradient at once, and hands its tensors to an optimizer.
 */
#ifndef QKV_PARAMS_H
#define QKV_PARAMS_H

#include "qkv/optim.h"
#include "qkv/rng.h"
#include "qkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a parameter starts. fan_in and fan_out are a 2-D weight's rows and
 * columns ([in, out], as qkv_linear stores it); for more dimensions, the
 * product of all but the last, and the last; for a vector, its length for
 * both. With g the gain (a, or 1 for Xavier and √2 for Kaiming when a is 0):
 *
 *   QKV_INIT_ZEROS, QKV_INIT_ONES   0, 1
 *   QKV_INIT_CONST                  a
 *   QKV_INIT_NORMAL                 N(a, b²)            (random.normalvariate(a, b))
 *   QKV_INIT_UNIFORM                U[a, b)             (a + (b - a)·random.random())
 *   QKV_INIT_XAVIER_NORMAL          N(0, g²·2/(fan_in + fan_out))
 *   QKV_INIT_XAVIER_UNIFORM         U[-l, l), l = g·√(6/(fan_in + fan_out))
 *   QKV_INIT_KAIMING_NORMAL         N(0, g²/fan_in)
 *   QKV_INIT_KAIMING_UNIFORM        U[-l, l), l = g·√(3/fan_in)
 *
 * Random values are drawn in row-major order from the list's generator. */
typedef enum qkv_init_kind {
    QKV_INIT_ZEROS,
    QKV_INIT_ONES,
    QKV_INIT_CONST,
    QKV_INIT_NORMAL,
    QKV_INIT_UNIFORM,
    QKV_INIT_XAVIER_NORMAL,
    QKV_INIT_XAVIER_UNIFORM,
    QKV_INIT_KAIMING_NORMAL,
    QKV_INIT_KAIMING_UNIFORM
} qkv_init_kind;

typedef struct qkv_init {
    qkv_init_kind kind;
    double a, b; /* see above */
} qkv_init;

typedef struct qkv_params qkv_params;

/* qkv_params_new(uint64_t seed, qkv_error *err): an empty list whose
 * initialisers draw from a qkv_rng seeded by seed (as random.seed(seed)).
 * NULL with the reason in err when memory runs out or the program's
 * scalar type differs from the library's. A macro: it passes QKV_ABI. */
qkv_params *qkv_params_new_abi(unsigned abi, uint64_t seed, qkv_error *err);
#define qkv_params_new(...) qkv_params_new_abi(QKV_ABI, __VA_ARGS__)

/* Frees the list and every tensor in it. Accepts NULL. */
void qkv_params_free(qkv_params *p);

/* Adds a parameter with a gradient buffer, initialised by init, and
 * returns it (owned by the list: qkv_tensor_free ignores it). Its name
 * (at most 127 bytes of UTF-8, unique in the list, e.g.
 * "block0.attn.qkv.weight") is how safetensors files know it, so it may
 * not be "__metadata__", the format's key for metadata. It gets weight
 * decay when it has two or more dimensions (weights and embeddings), and
 * none otherwise (biases, norm gains), as GPT-2 trains;
 * qkv_params_set_decay changes that. Returns the nil tensor with the
 * reason in err for a bad name or shape, a duplicate name, or no memory. */
qkv_tensor *qkv_params_add(qkv_params *p, const char *name, int ndim, const int *shape,
                           qkv_init init, qkv_error *err);

/* The parameter called name, or NULL. */
qkv_tensor *qkv_params_get(const qkv_params *p, const char *name);

/* How many parameters, and how many values in all. */
int qkv_params_count(const qkv_params *p);
size_t qkv_params_numel(const qkv_params *p);

/* Parameter i (0 .. count-1, in the order they were added) and its name
 * (*name may be NULL); NULL when i is out of range. */
qkv_tensor *qkv_params_at(const qkv_params *p, int i, const char **name);

/* The tensors in order, as an array of count entries (valid until the
 * next add), for qkv_optim_new and qkv_gradcheck. */
qkv_tensor **qkv_params_tensors(qkv_params *p);

/* Whether parameter i gets weight decay; set it. An optimizer takes the
 * settings when qkv_params_optim makes it: later changes here do not reach
 * it (qkv_optim_set_decay does). The setter returns QKV_ERR_ARG (and
 * changes nothing) for an index out of range. */
int qkv_params_decay(const qkv_params *p, int i);
qkv_status qkv_params_set_decay(qkv_params *p, int i, int on);

/* Sets every gradient to zero. */
void qkv_params_zero_grad(qkv_params *p);

/* The list's generator (for dropout, say, or more initialisation). */
qkv_rng *qkv_params_rng(qkv_params *p);

/* Fills t by init from g, with fans taken from t's shape (see above).
 * QKV_ERR_ARG for an init whose numbers make no sense (a negative
 * standard deviation, an empty uniform range, a number that is not
 * finite), and for one that draws a value qkv_real cannot hold (a
 * constant, range or spread beyond float32's 3.4e38 in the float build):
 * t is then partly filled, and qkv_params_add adds nothing. */
qkv_status qkv_init_tensor(qkv_tensor *t, qkv_init init, qkv_rng *g, qkv_error *err);

/* An optimizer over every parameter of the list, with each parameter's
 * weight decay switched on or off as the list says (cfg->weight_decay is
 * the rate for those that have it). See optim.h. It takes the parameters
 * there are now: one added later is not in it (make another optimizer).
 * Its messages (qkv_optim_error) name each parameter as the list does.
 * NULL with QKV_ERR_ARG for a NULL or empty list (an optimizer needs at
 * least one parameter), or qkv_optim_new's error. */
qkv_optim *qkv_params_optim(qkv_params *p, const qkv_optim_config *cfg, qkv_error *err);

#ifdef __cplusplus
}
#endif
#endif

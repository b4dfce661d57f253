/*
 * qkv.h - the qkv library in one include: tensors, the tape, the ops, the
 * runtime settings, the RNG, gradient checks, optimizers, parameter lists,
 * the layers and safetensors weights.
 *
 * The apps built on it (the tutorial's coreference task, the experiments)
 * have headers of their own under include/apps/; nothing here knows them.
 */
#ifndef QKV_H
#define QKV_H

#include "qkv/base.h"
#include "qkv/tensor.h"
#include "qkv/tape.h"
#include "qkv/ops.h"
#include "qkv/runtime.h"
#include "qkv/rng.h"
#include "qkv/gradcheck.h"
#include "qkv/optim.h"
#include "qkv/params.h"
#include "qkv/layers.h"
#include "qkv/safetensors.h"

#endif

/*
 * qkv.h - everything qkv offers, in one include.
 */
#ifndef QKV_H
#define QKV_H

#include "qkv/tensor.h"
#include "qkv/tape.h"
#include "qkv/kernels.h"
#include "qkv/ops.h"
#include "qkv/rng.h"
#include "qkv/gradcheck.h"
#include "qkv/optim.h"
#include "qkv/nn.h"
#include "qkv/coref.h"
#include "qkv/io.h"

#endif

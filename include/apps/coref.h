/*
 * coref.h - the tutorial's coreference task, an app built on the qkv
 * library: 「小明是个运动达人，他平时很爱打篮球」 — the pronoun 他 refers to
 * 小明. Its vocabulary and tokenizer, the generated sentences, the
 * self-attention model that learns Wq, Wk and Wv for it, its checkpoint,
 * and the training loop that `qkv train` and the experiments share.
 *
 * Nothing in the library (include/qkv.h) knows of it. It is built into the
 * qkv program, the tests and the examples, and is not installed.
 */
#ifndef QKV_APPS_COREF_H
#define QKV_APPS_COREF_H

#include "apps/coref/vocab.h"
#include "apps/coref/data.h"
#include "apps/coref/model.h"
#include "apps/coref/checkpoint.h"
#include "apps/coref/fit.h"
#include "apps/coref/seq.h"
#include "apps/coref/ablate.h"

#endif

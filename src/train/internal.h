/*
 * internal.h - the optimizer's insides, shared with the file that saves
 * and loads its state (src/layers/optim_state.c, a layer up: it writes
 * safetensors).
 */
#ifndef QKV_TRAIN_INTERNAL_H
#define QKV_TRAIN_INTERNAL_H

#include "qkv/optim.h"

struct qkv_optim {
    qkv_optim_config cfg;
    qkv_tensor **params; /* (n) not owned */
    int n;
    double **m, **v;      /* (n) first and second moments; SGD keeps its velocity in m, no v */
    unsigned char *decay; /* (n) 1: this parameter gets weight decay */
    double *lr_scale;     /* (n) each parameter's rate is lr times this (1 by default) */
    char **names;         /* (n) each parameter's name for messages, or NULL (its index) */
    char message[256];    /* why the last step failed, or "" */
    long t;               /* steps taken */
    double last_norm;
};

#endif

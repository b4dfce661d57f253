/*
 * checkpoint.c - the coreference model's checkpoint: a safetensors file of
 * its four weights, with its hyper-parameters and the vocabulary's
 * fingerprint in the metadata (see checkpoint.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/coref/checkpoint.h"
#include "apps/coref/data.h"
#include "qkv/safetensors.h"
#include "util/util.h"

#define KIND "qkv-coref" /* the "format" metadata of these checkpoints */

qkv_status qkv_coref_save(const qkv_coref_model *m, uint32_t fingerprint, const char *path,
                          qkv_error *err)
{
    if (m == NULL || path == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "save: no model or no path");
    char v[6][32], fp[16], version[16];
    snprintf(version, sizeof version, "%u", QKV_COREF_CHECKPOINT_VERSION);
    snprintf(v[0], sizeof v[0], "%d", m->cfg.vocab);
    snprintf(v[1], sizeof v[1], "%d", m->cfg.d_k);
    snprintf(v[2], sizeof v[2], "%d", m->cfg.classes);
    snprintf(v[3], sizeof v[3], "%d", m->cfg.scaled);
    snprintf(v[4], sizeof v[4], "%.17g", m->cfg.init_std + 0.0); /* -0 as "0" */
    snprintf(v[5], sizeof v[5], "%" PRIu64, m->cfg.seed);
    snprintf(fp, sizeof fp, "%08" PRIx32, fingerprint);
    const qkv_meta_entry meta[8] = {
        {"format", KIND},  {"version", "1"}, {"vocab", v[0]},    {"d_k", v[1]},
        {"classes", v[2]}, {"scaled", v[3]}, {"init_std", v[4]}, {"seed", v[5]},
    };
    /* the task levels, "1,2,3" or a part, when known: eval rebuilds the
     * splits the model was trained on from them and the seed */
    char levels[2 * QKV_COREF_LEVELS];
    size_t nl = 0;
    for (int l = 1; l <= QKV_COREF_LEVELS; l++)
        if (m->levels & (1u << (l - 1))) {
            if (nl > 0)
                levels[nl++] = ',';
            levels[nl++] = (char)('0' + l);
        }
    levels[nl] = '\0';
    qkv_meta_entry all[10];
    memcpy(all, meta, sizeof meta);
    all[8] = (qkv_meta_entry){"vocab_fingerprint", fp};
    all[9] = (qkv_meta_entry){"levels", levels};
    return qkv_safetensors_save(m->list, path, all, *levels ? 10 : 9, err);
}

/* Metadata key of f as a whole number in [lo, hi], the bounds the qkv
 * program's options have where it has one; 0, or -1 after recording why
 * (naming the key and the range). */
static int meta_uint(const qkv_st *f, const char *path, const char *key, uint64_t lo, uint64_t hi,
                     uint64_t *out, qkv_error *err)
{
    const char *s = qkv_st_meta(f, key);
    char *end;
    if (s != NULL && *s >= '0' && *s <= '9') {
        errno = 0; /* strtoull saturates past its range: ERANGE, not a value */
        unsigned long long v = strtoull(s, &end, 10);
        if (*end == '\0' && errno == 0 && v >= lo && v <= hi) {
            *out = (uint64_t)v;
            return 0;
        }
    }
    if (s == NULL)
        qkv_error_set(err, QKV_ERR_FORMAT, "%s: the metadata '%s' is missing", path, key);
    else
        qkv_error_set(err, QKV_ERR_FORMAT,
                      "%s: the metadata '%s' is not a whole number in [%" PRIu64 ", %" PRIu64 "]",
                      path, key, lo, hi);
    return -1;
}

/* The config from the metadata, checked; 0, or -1 after recording why. */
static int read_config(const qkv_st *f, const char *path, uint32_t fingerprint,
                       qkv_coref_config *cfg, qkv_error *err)
{
    const char *kind = qkv_st_meta(f, "format"), *version = qkv_st_meta(f, "version");
    if (kind == NULL || strcmp(kind, KIND) != 0) {
        qkv_error_set(err, QKV_ERR_FORMAT,
                      "%s is a safetensors file but not a qkv coreference checkpoint", path);
        return -1;
    }
    if (version == NULL || strcmp(version, "1") != 0) {
        qkv_error_set(err, QKV_ERR_FORMAT,
                      "%s has checkpoint version %s; this qkv reads version 1 (upgrade qkv)", path,
                      version == NULL ? "(none)" : version);
        return -1;
    }
    uint64_t fp, vocab, d_k, classes, scaled, seed;
    const char *fps = qkv_st_meta(f, "vocab_fingerprint");
    /* exactly as written: 8 lowercase hex digits (sscanf alone would take
     * " 234abcd", "0x34abcd" or capitals) */
    if (fps == NULL || strlen(fps) != 8 || strspn(fps, "0123456789abcdef") != 8 ||
        sscanf(fps, "%8" SCNx64, &fp) != 1) {
        qkv_error_set(err, QKV_ERR_FORMAT, "%s: the metadata 'vocab_fingerprint' is damaged", path);
        return -1;
    }
    if (fp != fingerprint) {
        qkv_error_set(err, QKV_ERR_FORMAT,
                      "%s was trained on another vocabulary (fingerprint %08" PRIx64
                      ", this build %08" PRIx32 ")",
                      path, fp, fingerprint);
        return -1;
    }
    if (meta_uint(f, path, "vocab", 1, INT32_MAX, &vocab, err) != 0 ||
        meta_uint(f, path, "d_k", 1, QKV_COREF_MAX_DK, &d_k, err) != 0 ||
        meta_uint(f, path, "classes", 1, INT32_MAX, &classes, err) != 0 ||
        meta_uint(f, path, "scaled", 0, 1, &scaled, err) != 0 ||
        meta_uint(f, path, "seed", 0, UINT64_MAX, &seed, err) != 0)
        return -1;
    const char *std = qkv_st_meta(f, "init_std");
    if (std == NULL) {
        qkv_error_set(err, QKV_ERR_FORMAT, "%s: the metadata 'init_std' is missing", path);
        return -1;
    }
    char *end = NULL;
    /* a decimal number as %.17g writes one: strtod alone would also take
     * " 0.5", "0x1p-1" or "infinity" */
    const char *digits = std + (*std == '-'); /* "-0": earlier builds wrote --init-std -0 so */
    const int decimal =
        *digits >= '0' && *digits <= '9' && strspn(std, "0123456789.e+-") == strlen(std);
    double init_std = decimal ? strtod(std, &end) + 0.0 : NAN; /* -0 taken as 0 */
    /* the bound of --init-std and of qkv_coref_model_new: a file
     * trained with neither is no checkpoint of ours */
    if (!decimal || *end != '\0' || !(init_std >= 0 && init_std <= QKV_COREF_MAX_INIT_STD)) {
        qkv_error_set(err, QKV_ERR_FORMAT, "%s: the metadata 'init_std' is not a number in [0, %d]",
                      path, QKV_COREF_MAX_INIT_STD);
        return -1;
    }
    cfg->vocab = (int)vocab;
    cfg->d_k = (int)d_k;
    cfg->classes = (int)classes;
    cfg->scaled = (int)scaled;
    cfg->init_std = init_std;
    cfg->seed = seed;
    return 0;
}

/* The model a checked file holds, or NULL after recording why. */
static qkv_coref_model *model_of(const qkv_st *f, const char *path, uint32_t fingerprint,
                                 qkv_error *err)
{
    qkv_coref_config cfg;
    if (read_config(f, path, fingerprint, &cfg, err) != 0)
        return NULL;
    /* the shapes the config implies, checked against the file before the
     * model is allocated: a header cannot make qkv allocate more than the
     * file's own values call for (at most twice their bytes, for F16 or
     * BF16 ones, four times in a double build) */
    const int want[QKV_COREF_PARAMS][2] = {
        {cfg.vocab, cfg.d_k}, {cfg.vocab, cfg.d_k}, {cfg.vocab, cfg.d_k}, {cfg.d_k, cfg.classes}};
    static const char *names[QKV_COREF_PARAMS] = {"wq", "wk", "wv", "wo"};
    for (int i = 0; i < QKV_COREF_PARAMS; i++) {
        int shape[QKV_MAX_DIMS], k = 0;
        while (k < qkv_st_count(f) && strcmp(qkv_st_name(f, k), names[i]) != 0)
            k++;
        if (k == qkv_st_count(f) || qkv_st_shape(f, k, shape) != 2 || shape[0] != want[i][0] ||
            shape[1] != want[i][1]) {
            qkv_error_set(err, QKV_ERR_FORMAT,
                          "%s has inconsistent shapes: tensor '%s' is missing or not [%d,%d] as "
                          "the metadata says",
                          path, names[i], want[i][0], want[i][1]);
            return NULL;
        }
    }
    /* the task levels: optional, as files from before they were recorded
     * lack them */
    const char *lv = qkv_st_meta(f, "levels");
    const unsigned levels = lv != NULL ? qkv_coref_parse_levels(lv) : 0;
    if (lv != NULL && levels == 0) {
        qkv_error_set(err, QKV_ERR_FORMAT, "%s: the metadata 'levels' is not a list of 1, 2, 3",
                      path);
        return NULL;
    }
    qkv_coref_model *m = qkv_coref_model_alloc(&cfg, err);
    if (m != NULL && qkv_st_load(f, m->list, err) != QKV_OK) {
        qkv_coref_model_free(m);
        return NULL;
    }
    if (m != NULL)
        m->levels = levels;
    return m;
}

qkv_coref_model *qkv_coref_load_buffer(const void *data, size_t len, const char *name,
                                       uint32_t fingerprint, qkv_error *err)
{
    qkv_st *f = qkv_st_parse(data, len, name != NULL ? name : "checkpoint", err);
    if (f == NULL)
        return NULL;
    qkv_coref_model *m = model_of(f, name, fingerprint, err);
    qkv_st_close(f);
    return m;
}

qkv_coref_model *qkv_coref_load_abi(unsigned abi, const char *path, uint32_t fingerprint,
                                    qkv_error *err)
{
    if (!qkv_abi_ok(abi, err))
        return NULL;
    if (path == NULL) {
        qkv_error_set(err, QKV_ERR_ARG, "load: no path");
        return NULL;
    }
    qkv_st *f = qkv_st_open(path, err);
    if (f == NULL)
        return NULL;
    qkv_coref_model *m = model_of(f, path, fingerprint, err);
    qkv_st_close(f);
    return m;
}

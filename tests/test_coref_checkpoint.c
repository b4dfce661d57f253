/*
 * test_coref_checkpoint.c - checkpoints round-trip, are written atomically,
 * and every fault gives a clear error instead of a crash.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests.h"

#define FP 0x1234abcdu

static char dir[64];
static char path[128];

static void setup(void)
{
    strcpy(dir, "/tmp/qkv_io_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.qkv", dir);
}

static void teardown(void)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static qkv_coref_model *small_model(void)
{
    qkv_coref_config c = {7, 3, 4, 1, 0.5, 9};
    qkv_coref_model *m = qkv_coref_model_new(&c, NULL);
    ck_assert_ptr_nonnull(m);
    return m;
}

static unsigned char *read_all(const char *p, long *n)
{
    FILE *f = fopen(p, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)*n);
    ck_assert_uint_eq(fread(b, 1, (size_t)*n, f), (size_t)*n);
    fclose(f);
    return b;
}

static void write_all(const char *p, const unsigned char *b, long n)
{
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
}

/* Loads path and expects failure with the status and a message part. */
static void expect_load_error(const char *p, uint32_t fp, qkv_status want, const char *part)
{
    qkv_error err = qkv_error_none();
    ck_assert_ptr_null(qkv_coref_load(p, fp, &err));
    ck_assert_int_eq(err.status, want);
    ck_assert_msg(strstr(err.message, part) != NULL, "message '%s' lacks '%s'", err.message, part);
}

START_TEST(test_checkpoint_round_trips_exactly)
{
    qkv_coref_model *m = small_model();
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_save(m, FP, path, &err), QKV_OK);
    qkv_coref_model *l = qkv_coref_load(path, FP, &err);
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(l->cfg.vocab, 7);
    ck_assert_int_eq(l->cfg.d_k, 3);
    ck_assert_int_eq(l->cfg.classes, 4);
    ck_assert_int_eq(l->cfg.scaled, 1);
    ck_assert(l->cfg.init_std == 0.5);
    ck_assert_uint_eq(l->cfg.seed, 9);
    for (int i = 0; i < QKV_COREF_PARAMS; i++)
        for (size_t j = 0; j < m->params[i]->numel; j++)
            ck_assert((float)m->params[i]->data[j] == (float)l->params[i]->data[j]);
    /* atomic write leaves no temporary file behind */
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ck_assert_int_ne(access(tmp, F_OK), 0);
    qkv_coref_model_free(m);
    qkv_coref_model_free(l);
}
END_TEST

START_TEST(test_every_checkpoint_fault_is_a_clear_error)
{
    qkv_coref_model *m = small_model();
    char p2[160];
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    long n;
    unsigned char *good = read_all(path, &n), *b = malloc((size_t)n);
    snprintf(p2, sizeof p2, "%s/bad.qkv", dir);

    expect_load_error("/nonexistent/qkv/model", FP, QKV_ERR_IO, "No such file");
    expect_load_error(dir, FP, QKV_ERR_IO, "is a directory");
    write_all(p2, good, 0);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "is empty");
    write_all(p2, good, n - 10);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "truncated");
    write_all(p2, good, 5);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "not a qkv checkpoint");
    memcpy(b, good, (size_t)n);
    b[n / 2] ^= 0x10; /* one flipped bit in the weights */
    write_all(p2, b, n);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "checksum mismatch");
    memcpy(b, good, (size_t)n);
    b[0] = 'X';
    write_all(p2, b, n);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "wrong magic");
    memcpy(b, good, (size_t)n);
    b[8] = 2; /* format version 2 */
    write_all(p2, b, n);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "format version 2");
    expect_load_error(path, FP + 1, QKV_ERR_FORMAT, "another vocabulary");
    /* the good file still loads */
    qkv_coref_model *l = qkv_coref_load(path, FP, NULL);
    ck_assert_ptr_nonnull(l);
    qkv_coref_model_free(l);
    free(good);
    free(b);
    qkv_coref_model_free(m);
}
END_TEST

START_TEST(test_save_reports_an_unwritable_path)
{
    qkv_coref_model *m = small_model();
    char p[160];
    qkv_error err = qkv_error_none();
    snprintf(p, sizeof p, "%s/missing/dir/m.qkv", dir);
    ck_assert_int_eq(qkv_coref_save(m, FP, p, &err), QKV_ERR_IO);
    ck_assert_int_eq(err.status, QKV_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "cannot write"));
    qkv_coref_model_free(m);
}
END_TEST

Suite *coref_checkpoint_suite(void)
{
    Suite *s = suite_create("coref_checkpoint");
    TCase *tc = tcase_create("checkpoint");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_checkpoint_round_trips_exactly);
    tcase_add_test(tc, test_every_checkpoint_fault_is_a_clear_error);
    tcase_add_test(tc, test_save_reports_an_unwritable_path);
    suite_add_tcase(s, tc);
    return s;
}

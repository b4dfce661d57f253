/*
 * test_io.c - checkpoints round-trip, are written atomically, and every
 * fault gives a clear error instead of a crash; CSV logs.
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

static qkv_model *small_model(void)
{
    qkv_model_config c = {7, 3, 4, 1, 0.5, 9};
    qkv_model *m = qkv_model_new(&c);
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
    qkv_status s = QKV_OK;
    char err[256] = "";
    ck_assert_ptr_null(qkv_model_load(p, fp, &s, err, sizeof err));
    ck_assert_int_eq(s, want);
    ck_assert_msg(strstr(err, part) != NULL, "message '%s' lacks '%s'", err, part);
}

START_TEST(test_checkpoint_round_trips_exactly)
{
    qkv_model *m = small_model();
    char err[256];
    ck_assert_int_eq(qkv_model_save(m, FP, path, err, sizeof err), QKV_OK);
    qkv_status s;
    qkv_model *l = qkv_model_load(path, FP, &s, err, sizeof err);
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(l->cfg.vocab, 7);
    ck_assert_int_eq(l->cfg.d_k, 3);
    ck_assert_int_eq(l->cfg.classes, 4);
    ck_assert_int_eq(l->cfg.scaled, 1);
    ck_assert(l->cfg.init_std == 0.5);
    ck_assert_uint_eq(l->cfg.seed, 9);
    for (int i = 0; i < QKV_MODEL_PARAMS; i++)
        for (size_t j = 0; j < m->params[i]->numel; j++)
            ck_assert((float)m->params[i]->data[j] == (float)l->params[i]->data[j]);
    /* atomic write leaves no temporary file behind */
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ck_assert_int_ne(access(tmp, F_OK), 0);
    qkv_model_free(m);
    qkv_model_free(l);
}
END_TEST

START_TEST(test_every_checkpoint_fault_is_a_clear_error)
{
    qkv_model *m = small_model();
    char err[256], p2[160];
    ck_assert_int_eq(qkv_model_save(m, FP, path, err, sizeof err), QKV_OK);
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
    qkv_model *l = qkv_model_load(path, FP, NULL, NULL, 0);
    ck_assert_ptr_nonnull(l);
    qkv_model_free(l);
    free(good);
    free(b);
    qkv_model_free(m);
}
END_TEST

START_TEST(test_save_reports_an_unwritable_path)
{
    qkv_model *m = small_model();
    char err[256], p[160];
    snprintf(p, sizeof p, "%s/missing/dir/m.qkv", dir);
    ck_assert_int_eq(qkv_model_save(m, FP, p, err, sizeof err), QKV_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err, "cannot write"));
    qkv_model_free(m);
}
END_TEST

START_TEST(test_csv_create_makes_directories_and_writes_the_header)
{
    char p[160], err[256], line[64];
    snprintf(p, sizeof p, "%s/a/b/log.csv", dir);
    FILE *f = qkv_csv_create(p, "step,loss", err, sizeof err);
    ck_assert_ptr_nonnull(f);
    fprintf(f, "1,0.5\n");
    fclose(f);
    f = fopen(p, "r");
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    ck_assert_str_eq(line, "step,loss\n");
    fclose(f);
    /* a file where a directory should be */
    snprintf(p, sizeof p, "%s/a/b/log.csv/x.csv", dir);
    ck_assert_ptr_null(qkv_csv_create(p, "h", err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "not a directory"));
}
END_TEST

Suite *io_suite(void)
{
    Suite *s = suite_create("io");
    TCase *tc = tcase_create("checkpoint");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_checkpoint_round_trips_exactly);
    tcase_add_test(tc, test_every_checkpoint_fault_is_a_clear_error);
    tcase_add_test(tc, test_save_reports_an_unwritable_path);
    tcase_add_test(tc, test_csv_create_makes_directories_and_writes_the_header);
    suite_add_tcase(s, tc);
    return s;
}

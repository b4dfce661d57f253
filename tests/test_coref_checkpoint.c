/*
 * test_coref_checkpoint.c - checkpoints round-trip, are written atomically,
 * and every fault gives a clear error instead of a crash.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests.h"

#define FP 0x1234abcdu
#ifdef QKV_DOUBLE
#define DT "F64"
#else
#define DT "F32"
#endif

static char dir[64];
static char path[128];

static void setup(void)
{
    strcpy(dir, "/tmp/qkv_io_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
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

/* How many entries (other than . and ..) the directory holds. */
static int files_in(const char *d)
{
    DIR *dp = opendir(d);
    ck_assert_ptr_nonnull(dp);
    int n = 0;
    for (struct dirent *e; (e = readdir(dp)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(dp);
    return n;
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
    ck_assert_int_eq(files_in(dir), 1);
    qkv_coref_model_free(m);
    qkv_coref_model_free(l);
}
END_TEST

/* The checkpoint good (n bytes) with the first occurrence of from in its
 * header replaced by to, the header length rewritten: a well-formed
 * safetensors file whose metadata or shapes say something else. */
static unsigned char *edit_header(const unsigned char *good, long n, const char *from,
                                  const char *to, long *out_n)
{
    uint64_t h = 0;
    for (int k = 7; k >= 0; k--)
        h = h << 8 | good[k];
    char *head = malloc(h + 1);
    memcpy(head, good + 8, h);
    head[h] = '\0';
    char *at = strstr(head, from);
    ck_assert_msg(at != NULL, "'%s' not in the header", from);
    size_t fl = strlen(from), tl = strlen(to), nh = h - fl + tl;
    *out_n = (long)(8 + nh + ((size_t)n - 8 - h));
    unsigned char *b = malloc((size_t)*out_n);
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)((uint64_t)nh >> (8 * k));
    size_t pre = (size_t)(at - head);
    memcpy(b + 8, head, pre);
    memcpy(b + 8 + pre, to, tl);
    memcpy(b + 8 + pre + tl, at + fl, h - pre - fl);
    memcpy(b + 8 + nh, good + 8 + h, (size_t)n - 8 - h);
    free(head);
    return b;
}

/* Loads the checkpoint good edited from -> to from memory and expects a
 * format error with a message part. */
static void expect_edit_refused(const unsigned char *good, long n, const char *from, const char *to,
                                const char *part)
{
    long m;
    unsigned char *b = edit_header(good, n, from, to, &m);
    qkv_error err = qkv_error_none();
    ck_assert_ptr_null(qkv_coref_load_buffer(b, (size_t)m, "edited", FP, &err));
    ck_assert_int_eq(err.status, QKV_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, part) != NULL, "message '%s' lacks '%s'", err.message, part);
    free(b);
}

START_TEST(test_every_checkpoint_fault_is_a_clear_error)
{
    qkv_coref_model *m = small_model();
    char p2[160];
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    long n;
    unsigned char *good = read_all(path, &n), *b = malloc((size_t)n);
    snprintf(p2, sizeof p2, "%s/bad.safetensors", dir);

    expect_load_error("/nonexistent/qkv/model", FP, QKV_ERR_IO, "No such file");
    expect_load_error(dir, FP, QKV_ERR_IO, "is a directory");
    write_all(p2, good, 0);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "is empty");
    write_all(p2, good, n - 10);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "past the end of the file");
    write_all(p2, good, 5);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "not a safetensors file: 5 bytes");
    memcpy(b, good, (size_t)n);
    b[n - 5] ^= 0x10; /* one flipped bit in the weights */
    write_all(p2, b, n);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "checksum mismatch");
    expect_load_error(path, FP + 1, QKV_ERR_FORMAT, "another vocabulary");
    /* the metadata, each part of it */
    expect_edit_refused(good, n, "\"format\":\"qkv-coref\"", "\"format\":\"pt\"",
                        "a safetensors file but not a qkv coreference checkpoint");
    expect_edit_refused(good, n, "\"version\":\"1\"", "\"version\":\"2\"",
                        "has checkpoint version 2; this qkv reads version 1");
    expect_edit_refused(good, n, "\"scaled\":\"1\"", "\"scaled\":\"2\"",
                        "the metadata 'scaled' is not a whole number in [0, 1]");
    expect_edit_refused(good, n, "\"classes\":\"4\",", "", "the metadata 'classes' is missing");
    /* 2^64: strtoull saturates at 2^64 - 1, which must not pass for it */
    expect_edit_refused(good, n, "\"seed\":\"9\"", "\"seed\":\"18446744073709551616\"",
                        "the metadata 'seed' is not a whole number in [0, 18446744073709551615]");
    expect_edit_refused(good, n, "\"init_std\":\"0.5\"", "\"init_std\":\"nan\"",
                        "the metadata 'init_std' is not a number in [0, 100]");
    /* missing, as the other fields say, not "not valid" */
    expect_edit_refused(good, n, "\"init_std\":\"0.5\",", "", "the metadata 'init_std' is missing");
    expect_edit_refused(good, n, "\"vocab_fingerprint\":\"1234abcd\"",
                        "\"vocab_fingerprint\":\"1234abc\"", "'vocab_fingerprint' is damaged");
    /* the two fields are read exactly as written: the same values in
     * another spelling (capitals, hex, a blank) are damage, not a match */
    expect_edit_refused(good, n, "\"vocab_fingerprint\":\"1234abcd\"",
                        "\"vocab_fingerprint\":\"1234ABCD\"", "'vocab_fingerprint' is damaged");
    expect_edit_refused(good, n, "\"vocab_fingerprint\":\"1234abcd\"",
                        "\"vocab_fingerprint\":\"0x34abcd\"", "'vocab_fingerprint' is damaged");
    expect_edit_refused(good, n, "\"init_std\":\"0.5\"", "\"init_std\":\"0x1p-1\"",
                        "the metadata 'init_std' is not a number in [0, 100]");
    expect_edit_refused(good, n, "\"init_std\":\"0.5\"", "\"init_std\":\" 0.5\"",
                        "the metadata 'init_std' is not a number in [0, 100]");
    /* nor a leading point, which %.17g never writes */
    expect_edit_refused(good, n, "\"init_std\":\"0.5\"", "\"init_std\":\".5\"",
                        "the metadata 'init_std' is not a number in [0, 100]");
    /* the shapes must be the ones the metadata implies */
    expect_edit_refused(good, n, "\"wo\":{\"dtype\":\"" DT "\",\"shape\":[3,4]",
                        "\"wo\":{\"dtype\":\"" DT "\",\"shape\":[4,3]",
                        "tensor 'wo' is missing or not [3,4]");
    /* the second dimension too: 5 classes call for a wo of [3,5] */
    expect_edit_refused(good, n, "\"classes\":\"4\"", "\"classes\":\"5\"",
                        "tensor 'wo' is missing or not [3,5]");
    /* the good file still loads */
    qkv_coref_model *l = qkv_coref_load(path, FP, NULL);
    ck_assert_ptr_nonnull(l);
    qkv_coref_model_free(l);
    free(good);
    free(b);
    qkv_coref_model_free(m);
}
END_TEST

/* The levels a model was trained on are saved as "1,2,3" or a part, and
 * a list that is not one is damage, not "no levels". */
START_TEST(test_the_levels_metadata_is_kept_and_checked)
{
    qkv_coref_model *m = small_model();
    m->levels = 5; /* levels 1 and 3 */
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    qkv_coref_model *l = qkv_coref_load(path, FP, NULL);
    ck_assert_ptr_nonnull(l);
    ck_assert_uint_eq(l->levels, 5);
    qkv_coref_model_free(l);
    long n;
    unsigned char *good = read_all(path, &n);
    expect_edit_refused(good, n, "\"levels\":\"1,3\"", "\"levels\":\"1,4\"",
                        "the metadata 'levels' is not a list of 1, 2, 3");
    expect_edit_refused(good, n, "\"levels\":\"1,3\"", "\"levels\":\"1;3\"",
                        "the metadata 'levels' is not a list of 1, 2, 3");
    free(good);
    qkv_coref_model_free(m);
}
END_TEST

/* An init_std of -0 is saved as "0", as qkv train echoes it. */
START_TEST(test_an_init_std_of_minus_zero_is_saved_as_0)
{
    qkv_coref_config c = {7, 3, 4, 1, -0.0, 9};
    qkv_coref_model *m = qkv_coref_model_new(&c, NULL);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    qkv_st *f = qkv_st_open(path, NULL);
    ck_assert_ptr_nonnull(f);
    ck_assert_str_eq(qkv_st_meta(f, "init_std"), "0");
    qkv_st_close(f);
    qkv_coref_model_free(m);
}
END_TEST

START_TEST(test_metadata_declaring_a_huge_model_is_refused_before_allocating)
{
    /* a small file whose metadata declares vocab 2^20 and d_k 4096: 2^32
     * weights, 16 GiB; refused from the shapes alone, allocating nothing
     * larger than a few times the file */
    qkv_coref_model *m = small_model();
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    long n, n1, n2;
    unsigned char *good = read_all(path, &n);
    unsigned char *b1 = edit_header(good, n, "\"vocab\":\"7\"", "\"vocab\":\"1048576\"", &n1);
    unsigned char *b2 = edit_header(b1, n1, "\"d_k\":\"3\"", "\"d_k\":\"4096\"", &n2);
    qkv_alloc_largest(1);
    qkv_error err = qkv_error_none();
    ck_assert_ptr_null(qkv_coref_load_buffer(b2, (size_t)n2, "big", FP, &err));
    ck_assert_uint_le(qkv_alloc_largest(0), 16 * (size_t)n2);
    ck_assert_int_eq(err.status, QKV_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "inconsistent shapes"), "%s", err.message);
    free(b2);
    /* d_k beyond what any command allows is refused from the metadata */
    expect_edit_refused(good, n, "\"d_k\":\"3\"", "\"d_k\":\"65536\"",
                        "the metadata 'd_k' is not a whole number in [1, 4096]");
    free(b1);
    free(good);
    qkv_coref_model_free(m);
}
END_TEST

/* A checkpoint's hyper-parameters are held to the bounds the program's
 * options have (--init-std at most 100, --d-k at most 4096, ...): the
 * loader took init_std up to 1e308, which no command would train with.
 * The message names the key and the range, as an option's does. */
START_TEST(test_every_hyper_parameter_is_held_to_the_options_bounds)
{
    qkv_coref_model *m = small_model();
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    long n;
    unsigned char *good = read_all(path, &n);
    static const char *const refused[][3] = {
        {"\"init_std\":\"0.5\"", "\"init_std\":\"1e308\"",
         "the metadata 'init_std' is not a number in [0, 100]"},
        {"\"init_std\":\"0.5\"", "\"init_std\":\"100.5\"",
         "the metadata 'init_std' is not a number in [0, 100]"},
        {"\"init_std\":\"0.5\"", "\"init_std\":\"-0.5\"",
         "the metadata 'init_std' is not a number in [0, 100]"},
        {"\"d_k\":\"3\"", "\"d_k\":\"4097\"",
         "the metadata 'd_k' is not a whole number in [1, 4096]"},
        {"\"d_k\":\"3\"", "\"d_k\":\"0\"", "the metadata 'd_k' is not a whole number in [1, 4096]"},
        {"\"scaled\":\"1\"", "\"scaled\":\"2\"",
         "the metadata 'scaled' is not a whole number in [0, 1]"},
        {"\"vocab\":\"7\"", "\"vocab\":\"0\"",
         "the metadata 'vocab' is not a whole number in [1, 2147483647]"},
        {"\"classes\":\"4\"", "\"classes\":\"x\"",
         "the metadata 'classes' is not a whole number in [1, 2147483647]"},
        {"\"seed\":\"9\"", "\"seed\":\"18446744073709551616\"",
         "the metadata 'seed' is not a whole number in [0, 18446744073709551615]"},
        /* whole numbers as written, digits only: strtoull alone would take
         * "-1" as 2^64 - 1, and skip a sign or a blank */
        {"\"seed\":\"9\"", "\"seed\":\"-1\"",
         "the metadata 'seed' is not a whole number in [0, 18446744073709551615]"},
        {"\"d_k\":\"3\"", "\"d_k\":\"+3\"",
         "the metadata 'd_k' is not a whole number in [1, 4096]"},
        {"\"d_k\":\"3\"", "\"d_k\":\" 3\"",
         "the metadata 'd_k' is not a whole number in [1, 4096]"},
        /* and a number with anything after it is no number (strtod stops
         * before the second '.' and at a lone 'e') */
        {"\"init_std\":\"0.5\"", "\"init_std\":\"0.5.5\"",
         "the metadata 'init_std' is not a number in [0, 100]"},
        {"\"init_std\":\"0.5\"", "\"init_std\":\"1e\"",
         "the metadata 'init_std' is not a number in [0, 100]"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        expect_edit_refused(good, n, refused[i][0], refused[i][1], refused[i][2]);
    /* the bounds themselves load, and the "-0" that earlier builds
     * wrote for --init-std -0 loads as 0 */
    static const char *const taken[] = {"\"init_std\":\"100\"", "\"init_std\":\"0\"",
                                        "\"init_std\":\"-0\""};
    static const double want[] = {100, 0, 0};
    for (size_t i = 0; i < sizeof taken / sizeof taken[0]; i++) {
        long e;
        unsigned char *b = edit_header(good, n, "\"init_std\":\"0.5\"", taken[i], &e);
        qkv_error err = qkv_error_none();
        qkv_coref_model *l = qkv_coref_load_buffer(b, (size_t)e, "edge", FP, &err);
        ck_assert_msg(l != NULL, "%s: %s", taken[i], err.message);
        ck_assert_msg(l->cfg.init_std == want[i] && !signbit(l->cfg.init_std), "%s: %g", taken[i],
                      l->cfg.init_std);
        qkv_coref_model_free(l);
        free(b);
    }
    /* and a model is made within them, so that what is saved loads */
    qkv_coref_config c = {7, 3, 4, 1, 100.5, 9};
    qkv_error err = qkv_error_none();
    ck_assert_ptr_null(qkv_coref_model_new(&c, &err));
    ck_assert_msg(strstr(err.message, "init_std from 0 to 100"), "%s", err.message);
    c.init_std = 100;
    qkv_coref_model *edge = qkv_coref_model_new(&c, &err);
    ck_assert_ptr_nonnull(edge);
    qkv_coref_model_free(edge);
    free(good);
    qkv_coref_model_free(m);
}
END_TEST

START_TEST(test_save_reports_an_unwritable_path)
{
    qkv_coref_model *m = small_model();
    char p[160];
    qkv_error err = qkv_error_none();
    snprintf(p, sizeof p, "%s/missing/dir/m.safetensors", dir);
    ck_assert_int_eq(qkv_coref_save(m, FP, p, &err), QKV_ERR_IO);
    ck_assert_int_eq(err.status, QKV_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "cannot write"));
    qkv_coref_model_free(m);
}
END_TEST

/* Saves m, then checks that saving bad (which must fail with status want)
 * leaves the file exactly as it was and no temporary file behind. */
static void expect_save_refused(qkv_coref_model *bad, const char *target, qkv_status want,
                                const char *part)
{
    long n0, n1;
    unsigned char *before = read_all(path, &n0);
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_save(bad, FP, target, &err), want);
    ck_assert_msg(strstr(err.message, part) != NULL, "'%s' lacks '%s'", err.message, part);
    unsigned char *after = read_all(path, &n1);
    ck_assert(n0 == n1 && memcmp(before, after, (size_t)n0) == 0);
    free(before);
    free(after);
}

START_TEST(test_a_non_finite_model_never_replaces_a_good_one)
{
    qkv_coref_model *m = small_model();
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    m->wv->data[5] = NAN;
    expect_save_refused(m, path, QKV_ERR_NUMERIC, "wv[5] = NaN");
    m->wv->data[5] = INFINITY;
    expect_save_refused(m, path, QKV_ERR_NUMERIC, "not finite");
    ck_assert_int_eq(files_in(dir), 1);
    qkv_coref_model_free(m);
}
END_TEST

START_TEST(test_saving_replaces_only_regular_files_and_follows_no_link)
{
    char link[160], victim[160], planted[160];
    qkv_coref_model *m = small_model();
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    /* a device node stays a device */
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_save(m, FP, "/dev/null", &err), QKV_ERR_IO);
    ck_assert_msg(strstr(err.message, "not a regular file"), "%s", err.message);
    struct stat sb;
    ck_assert_int_eq(stat("/dev/null", &sb), 0);
    ck_assert(S_ISCHR(sb.st_mode));
    /* a symbolic link as the target is refused; its victim is untouched */
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(link, sizeof link, "%s/link.safetensors", dir);
    write_all(victim, (const unsigned char *)"victim", 6);
    ck_assert_int_eq(symlink(victim, link), 0);
    ck_assert_int_eq(qkv_coref_save(m, FP, link, &err), QKV_ERR_IO);
    ck_assert_msg(strstr(err.message, "symbolic link"), "%s", err.message);
    /* a link planted where the old fixed temporary name was is never
     * touched: the temporary file's name is new each time (O_EXCL) */
    snprintf(planted, sizeof planted, "%s.tmp", path);
    ck_assert_int_eq(symlink(victim, planted), 0);
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    long n;
    unsigned char *v = read_all(victim, &n);
    ck_assert(n == 6 && memcmp(v, "victim", 6) == 0);
    free(v);
    ck_assert_int_eq(lstat(planted, &sb), 0);
    ck_assert(S_ISLNK(sb.st_mode));
    qkv_coref_model_free(m);
}
END_TEST

START_TEST(test_a_full_disk_leaves_the_previous_checkpoint)
{
    qkv_coref_model *m = small_model();
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    m->wq->data[0] += 1;
    /* files may grow to 100 bytes only (this test runs in its own
     * process): writes past that fail with EFBIG, as on a full disk */
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim = {100, 100};
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim.rlim_max = old.rlim_max; /* lower the soft limit only, to raise it again */
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    long n0;
    unsigned char *before = read_all(path, &n0);
    qkv_error err = qkv_error_none();
    qkv_status s = qkv_coref_save(m, FP, path, &err);
    setrlimit(RLIMIT_FSIZE, &old); /* for the tests after this one (CK_FORK=no) */
    signal(SIGXFSZ, old_handler);
    ck_assert_int_eq(s, QKV_ERR_IO);
    ck_assert_msg(strstr(err.message, "cannot write"), "%s", err.message);
    long n1;
    unsigned char *after = read_all(path, &n1);
    ck_assert(n0 == n1 && memcmp(before, after, (size_t)n0) == 0);
    ck_assert_int_eq(files_in(dir), 1); /* the temporary file is gone */
    free(before);
    free(after);
    qkv_coref_model_free(m);
}
END_TEST

/* Saves the model twenty times to one path. */
static void *save_twenty(void *arg)
{
    qkv_coref_model *m = arg;
    for (int i = 0; i < 20; i++)
        if (qkv_coref_save(m, FP, path, NULL) != QKV_OK)
            return (void *)1;
    return NULL;
}

START_TEST(test_two_saves_to_one_path_at_once_both_succeed)
{
    qkv_coref_model *m = small_model();
    pthread_t a, b;
    void *ra, *rb;
    ck_assert_int_eq(pthread_create(&a, NULL, save_twenty, m), 0);
    ck_assert_int_eq(pthread_create(&b, NULL, save_twenty, m), 0);
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    ck_assert_ptr_null(ra);
    ck_assert_ptr_null(rb);
    qkv_coref_model *l = qkv_coref_load(path, FP, NULL);
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(files_in(dir), 1);
    qkv_coref_model_free(l);
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
    tcase_add_test(tc, test_the_levels_metadata_is_kept_and_checked);
    tcase_add_test(tc, test_an_init_std_of_minus_zero_is_saved_as_0);
    tcase_add_test(tc, test_metadata_declaring_a_huge_model_is_refused_before_allocating);
    tcase_add_test(tc, test_every_hyper_parameter_is_held_to_the_options_bounds);
    tcase_add_test(tc, test_a_non_finite_model_never_replaces_a_good_one);
    tcase_add_test(tc, test_saving_replaces_only_regular_files_and_follows_no_link);
    tcase_add_test(tc, test_a_full_disk_leaves_the_previous_checkpoint);
    tcase_add_test(tc, test_two_saves_to_one_path_at_once_both_succeed);
    suite_add_tcase(s, tc);
    return s;
}
